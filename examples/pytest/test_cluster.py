"""Tests using the `k8s` fixture from conftest.py: a whole cluster, controllers included."""
import time

from kubernetes import client, watch


def test_nodes_are_ready(k8s):
    nodes = client.CoreV1Api(k8s).list_node().items
    assert len(nodes) == 2
    for node in nodes:
        ready = [c for c in node.status.conditions if c.type == "Ready"]
        assert ready and ready[0].status == "True"


def test_a_deployment_rolls_out(k8s):
    apps = client.AppsV1Api(k8s)
    apps.create_namespaced_deployment("default", {
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}})
    deadline = time.monotonic() + 60
    for event in watch.Watch().stream(apps.list_namespaced_deployment, "default",
                                      field_selector="metadata.name=web", timeout_seconds=60):
        status = event["object"].status
        if status is not None and status.ready_replicas == 2:
            break
        assert time.monotonic() < deadline
    else:
        raise AssertionError("the deployment never had 2 ready replicas")
