"""The official Python client's CustomObjectsApi against a cluster (argv[1]: kubeconfig):
a CRD created and established, custom objects created, read, listed by label, patched
(spec and status), watched and deleted. Prints one line per check for the e2e test."""
import sys
import time

from kubernetes import client, config, watch

config.load_kube_config(sys.argv[1])
ext = client.ApiextensionsV1Api()
crd = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "gadgets.py.example.com"},
    "spec": {"group": "py.example.com", "scope": "Namespaced",
             "names": {"plural": "gadgets", "kind": "Gadget"},
             "versions": [{"name": "v1", "served": True, "storage": True,
                           "subresources": {"status": {}},
                           "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                               "spec": {"type": "object", "properties": {"size": {"type": "integer", "default": 1}}},
                               "status": {"type": "object", "properties": {"ok": {"type": "boolean"}}}}}}}]}}
ext.create_custom_resource_definition(crd)
deadline = time.time() + 30
while time.time() < deadline:
    got = ext.read_custom_resource_definition("gadgets.py.example.com")
    if any(c.type == "Established" and c.status == "True" for c in (got.status.conditions or [])):
        print("ESTABLISHED")
        break
    time.sleep(0.1)

api = client.CustomObjectsApi()
args = ("py.example.com", "v1", "default", "gadgets")
made = api.create_namespaced_custom_object(*args, {
    "apiVersion": "py.example.com/v1", "kind": "Gadget",
    "metadata": {"name": "g1", "labels": {"tier": "a"}}, "spec": {}})
print("CREATED", made["metadata"]["name"], made["spec"]["size"])
print("GOT", api.get_namespaced_custom_object(*args, "g1")["metadata"]["name"])
listed = api.list_namespaced_custom_object(*args, label_selector="tier=a")
print("LISTED", [i["metadata"]["name"] for i in listed["items"]])
rv = listed["metadata"]["resourceVersion"]
patched = api.patch_namespaced_custom_object(*args, "g1", {"spec": {"size": 4}})
print("PATCHED", patched["spec"]["size"], patched["metadata"]["generation"])
status = api.patch_namespaced_custom_object_status(*args, "g1", {"status": {"ok": True}})
print("STATUS", status["status"]["ok"], status["metadata"]["generation"])
w = watch.Watch()
for ev in w.stream(api.list_namespaced_custom_object, *args, resource_version=rv, timeout_seconds=10):
    if ev["type"] == "MODIFIED" and ev["object"]["spec"]["size"] == 4:
        print("WATCHED", ev["type"])
        w.stop()
api.delete_namespaced_custom_object(*args, "g1")
try:
    api.get_namespaced_custom_object(*args, "g1")
    print("STILL THERE")
except client.exceptions.ApiException as e:
    print("DELETED", e.status)
