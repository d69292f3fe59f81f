#!/usr/bin/env python3
"""Regenerates crates/api/src/proto/schema.txt: the protobuf field numbers of the served types
(their objects and lists, and Status).

Kubernetes clients (kubectl's `create namespace|configmap|secret|deployment` among them) send
`application/vnd.kubernetes.protobuf` bodies. Decoding one needs, for every message, each field's
number, wire type and JSON name. The numbers and wire types are read from the `k8s-pb` crate
(prost bindings generated from upstream's generated.proto files); the JSON names from the
`k8s-openapi` crate the workspace already builds (its serde field names). The output is a plain
table, one message per block:

    message api.core.v1.Secret
    1 metadata m apimachinery.pkg.apis.meta.v1.ObjectMeta
    2 data map:y
    5 immutable b

Kinds: s string, b bool, i32, i64, d double, y bytes, m <message>; a leading `*` marks a repeated
field; `map:s|y|m <message>` a map keyed by string. A JSON name `-` marks an embedded message
whose fields are inlined into the parent's JSON object.

    python3 scripts/gen-proto-schema.py            # downloads k8s-pb from static.crates.io
    python3 scripts/gen-proto-schema.py --k8s-pb DIR
"""
import argparse, glob, io, json, os, re, subprocess, sys, tarfile, urllib.request

K8S_PB = "0.7.0"
# Messages a client may send us, and everything they reach.
ROOTS = [
    "api.core.v1.Namespace", "api.core.v1.Pod", "api.core.v1.Node", "api.core.v1.Event",
    "api.core.v1.ConfigMap", "api.core.v1.Secret", "api.core.v1.Service", "api.core.v1.ServiceAccount",
    "api.core.v1.LimitRange", "api.core.v1.ResourceQuota", "api.core.v1.Endpoints",
    "api.core.v1.PersistentVolumeClaim", "api.core.v1.PersistentVolume", "api.core.v1.PodTemplate",
    "api.core.v1.ReplicationController",
    "api.core.v1.Binding", "api.apps.v1.Deployment", "api.apps.v1.ReplicaSet",
    "api.apps.v1.StatefulSet", "api.apps.v1.DaemonSet", "api.apps.v1.ControllerRevision",
    "api.batch.v1.Job", "api.batch.v1.CronJob", "api.autoscaling.v2.HorizontalPodAutoscaler",
    "api.autoscaling.v1.HorizontalPodAutoscaler",
    "api.policy.v1.PodDisruptionBudget", "api.discovery.v1.EndpointSlice", "api.events.v1.Event",
    "api.networking.v1.Ingress", "api.networking.v1.IngressClass", "api.networking.v1.NetworkPolicy",
    "api.networking.v1.ServiceCIDR", "api.networking.v1.IPAddress",
    "api.storage.v1.StorageClass", "api.storage.v1.CSIDriver", "api.storage.v1.CSINode",
    "api.storage.v1.VolumeAttachment", "api.storage.v1.CSIStorageCapacity",
    "api.scheduling.v1.PriorityClass", "api.node.v1.RuntimeClass",
    "api.certificates.v1.CertificateSigningRequest",
    "api.admissionregistration.v1.MutatingWebhookConfiguration",
    "api.admissionregistration.v1.ValidatingWebhookConfiguration",
    "api.admissionregistration.v1.ValidatingAdmissionPolicy",
    "api.admissionregistration.v1.ValidatingAdmissionPolicyBinding",
    "api.authentication.v1.TokenReview", "api.authentication.v1.TokenRequest",
    "api.authorization.v1.SubjectAccessReview", "api.authorization.v1.LocalSubjectAccessReview",
    "api.coordination.v1.Lease", "api.rbac.v1.Role", "api.rbac.v1.RoleBinding",
    "api.rbac.v1.ClusterRole", "api.rbac.v1.ClusterRoleBinding", "api.policy.v1.Eviction",
    "api.autoscaling.v1.Scale", "apimachinery.pkg.apis.meta.v1.DeleteOptions",
    "api.authorization.v1.SelfSubjectAccessReview", "api.authorization.v1.SelfSubjectRulesReview",
    "api.authentication.v1.SelfSubjectReview",
    "api.flowcontrol.v1.FlowSchema", "api.flowcontrol.v1.PriorityLevelConfiguration",
]
# Messages only the apiserver sends.
RESPONSE_ROOTS = ["apimachinery.pkg.apis.meta.v1.Status", "apimachinery.pkg.apis.meta.v1.WatchEvent"]
# Wrapper messages with their own JSON form: decoded by hand, not by table.
SPECIAL = {
    "apimachinery.pkg.apis.meta.v1.Time", "apimachinery.pkg.apis.meta.v1.MicroTime",
    "apimachinery.pkg.apis.meta.v1.Duration", "apimachinery.pkg.apis.meta.v1.FieldsV1",
    "apimachinery.pkg.api.resource.Quantity", "apimachinery.pkg.util.intstr.IntOrString",
    "apimachinery.pkg.runtime.RawExtension", "api.authentication.v1.ExtraValue",
    "api.certificates.v1.ExtraValue", "api.authorization.v1.ExtraValue",
}
SCALARS = {"string": "s", "bool": "b", "int32": "i32", "int64": "i64", "double": "d", "bytes": "y"}


def fetch_k8s_pb(dest):
    url = f"https://static.crates.io/crates/k8s-pb/k8s-pb-{K8S_PB}.crate"
    data = urllib.request.urlopen(url, timeout=60).read()
    tarfile.open(fileobj=io.BytesIO(data)).extractall(dest)
    return os.path.join(dest, f"k8s-pb-{K8S_PB}")


def k8s_openapi_dir():
    found = sorted(glob.glob(os.path.expanduser("~/.cargo/registry/src/*/k8s-openapi-0.25.*/src/v1_33")))
    if found:
        return found[-1]
    meta = json.loads(subprocess.check_output(["cargo", "metadata", "--format-version", "1"]))
    for p in meta["packages"]:
        if p["name"] == "k8s-openapi":
            return os.path.join(os.path.dirname(p["manifest_path"]), "src", "v1_33")
    sys.exit("k8s-openapi not found in cargo metadata")


def resolve(module, path):
    """A Rust type path as written in `module` -> dotted message name."""
    path = path.strip().rstrip(",").replace("::core::option::Option<", "").rstrip(">").rstrip(",")
    parts = path.split("::")
    mod = list(module)
    while parts and parts[0] == "super":
        mod.pop()
        parts.pop(0)
    return ".".join(mod + parts)


def parse_pb(root):
    messages = {}
    for f in glob.glob(os.path.join(root, "src", "**", "mod.rs"), recursive=True):
        module = os.path.relpath(os.path.dirname(f), os.path.join(root, "src")).split(os.sep)
        text = open(f).read()
        for m in re.finditer(r"pub struct (\w+) \{(.*?)\n\}", text, re.S):
            name = ".".join(module + [m.group(1)])
            fields = []
            body = re.sub(r"^\s*///.*$", "", m.group(2), flags=re.M)
            for chunk in body.split("#[prost(")[1:]:
                fm = re.match(r"([^)]*)\)\]\s*pub (r#)?(\w+):(.*),\s*$", chunk, re.S)
                attrs, rust, ty = fm.group(1), fm.group(3), "".join(fm.group(4).split())
                tag = int(re.search(r'tag = "(\d+)"', attrs).group(1))
                kind = attrs.split(",")[0].strip()
                if kind.startswith("btree_map"):
                    val = re.search(r'btree_map = "string, (\w+)"', attrs).group(1)
                    if val == "message":
                        inner = re.search(r"BTreeMap<[^,]*String,(.*)>$", ty).group(1)
                        fields.append((tag, rust, "map:m", resolve(module, inner)))
                    else:
                        fields.append((tag, rust, "map:" + SCALARS[val], None))
                    continue
                repeated = "repeated" in attrs
                if kind == "message":
                    inner = ty
                    inner = re.sub(r"^::prost::alloc::vec::Vec<(.*)>$", r"\1", inner)
                    inner = re.sub(r"^::core::option::Option<(.*)>$", r"\1", inner)
                    inner = re.sub(r"^::prost::alloc::boxed::Box<(.*)>$", r"\1", inner)
                    fields.append((tag, rust, ("*" if repeated else "") + "m", resolve(module, inner)))
                else:
                    k = "y" if kind.startswith("bytes") else SCALARS[kind]
                    fields.append((tag, rust, ("*" if repeated else "") + k, None))
            messages[name] = fields
    return messages


def json_names(openapi, message):
    """{lowercased json_name: json_name} from k8s-openapi's serde impl of the same type."""
    parts = message.split(".")
    snake = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", parts[-1])
    snake = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", snake).lower()
    path = os.path.join(openapi, *parts[:-1], snake + ".rs")
    if not os.path.exists(path):
        return None
    # Matched case- and underscore-blind: k8s-pb spells podCIDRs `pod_cid_rs`, k8s-openapi `pod_cidrs`.
    return {j.lower(): j for j in re.findall(r'"([A-Za-z0-9$_-]+)" => Field::Key_\w+,', open(path).read())}


def covered(messages, ref, names, depth=0):
    """Whether every field of `ref` is a JSON field of `names`, directly or through an embedded
    message of its own (admission rules embed two levels deep)."""
    if ref not in messages or depth > 3:
        return False
    return all(r.replace("_", "").lower() in names
               or (k == "m" and covered(messages, sub, names, depth + 1))
               for _, r, k, sub in messages[ref])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--k8s-pb")
    ap.add_argument("--out", default="crates/api/src/proto/schema.txt")
    args = ap.parse_args()
    pb = args.k8s_pb or fetch_k8s_pb("/tmp/rkube-k8s-pb")
    messages = parse_pb(pb)
    openapi = k8s_openapi_dir()
    # Responses too: each kind's List where upstream has one, and the Status of errors.
    roots = ROOTS + [r + "List" for r in ROOTS if r + "List" in messages] + RESPONSE_ROOTS
    out, seen, todo = [], set(), roots
    inlined_in = {}  # embedded message -> the type whose JSON object holds its fields
    while todo:
        name = todo.pop(0)
        if name in seen or name in SPECIAL:
            continue
        seen.add(name)
        if name not in messages:
            sys.exit(f"no message {name} in k8s-pb")
        names = json_names(openapi, name)
        if names is None and name in inlined_in:
            names = json_names(openapi, inlined_in[name])
        if names is None and name.endswith("List"):
            names = {"metadata": "metadata", "items": "items"}  # k8s-openapi's generic List<T>
        if names is None and name.endswith(".WatchEvent"):
            names = {"type": "type", "object": "object"}
        if names is None:
            sys.exit(f"no k8s-openapi type for {name}")
        out.append(f"message {name}")
        for tag, rust, kind, ref in sorted(messages[name]):
            json_name = names.get(rust.replace("_", "").lower())
            if json_name is None and kind == "m" and covered(messages, ref, names):
                json_name = "-"  # an embedded Go struct (`json:",inline"`): its fields sit in ours
                inlined_in[ref] = name
            if json_name is None:
                sys.exit(f"{name}.{rust}: no JSON name in k8s-openapi")
            out.append(f"{tag} {json_name} {kind}" + (f" {ref}" if ref else ""))
            if ref:
                todo.append(ref)
    header = (f"# Generated by scripts/gen-proto-schema.py from k8s-pb {K8S_PB} (field numbers) and\n"
              "# k8s-openapi (JSON names). Do not edit.\n")
    with open(args.out, "w") as f:
        f.write(header + "\n".join(out) + "\n")
    print(f"{len(seen)} messages -> {args.out}")


main()
