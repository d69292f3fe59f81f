//! CustomResourceDefinitions through stock kubectl on the real binaries: a CRD applied and
//! established, its custom resources applied (client-side and server-side), printed with
//! their columns and short name, found by `get all`, scaled, explained, patched; the garbage
//! collector and namespace deletion covering them; a several-hundred-KB CRD applied
//! server-side; and a deleted CRD taking its objects with it.

use rkube_e2e::{Cluster, Opts};

use crate::builtin::{eventually, kubectl};
use crate::kubectl::{contains, manifest};

const CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd], categories: [all]}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            description: What the widget should be.
            required: [color]
            properties:
              color: {type: string, enum: [red, blue], description: The widget's colour.}
              replicas: {type: integer, minimum: 0, default: 1}
          status:
            type: object
            properties:
              replicas: {type: integer}
              selector: {type: string}
    subresources:
      status: {}
      scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas, labelSelectorPath: .status.selector}
    additionalPrinterColumns:
    - {name: Color, type: string, jsonPath: .spec.color}
    - {name: Replicas, type: integer, jsonPath: .spec.replicas}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
"#;

const WIDGET: &str =
    "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  color: red\n";

/// A CRD whose schema has `n` described properties (about 130 bytes each).
fn big_crd(n: usize) -> String {
    let mut props = String::new();
    for i in 0..n {
        props.push_str(&format!(
            "              field{i:05}: {{type: string, description: \"Field number {i} of a generated schema, described at length as real charts describe theirs.\"}}\n"
        ));
    }
    format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: bigs.example.com\nspec:\n  group: example.com\n  scope: Namespaced\n  names: {{plural: bigs, kind: Big}}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        properties:\n          spec:\n            type: object\n            properties:\n{props}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resources_through_kubectl() {
    let c = Cluster::start(Opts {
        nodes: 1,
        ..Default::default()
    })
    .await;
    let k = kubectl(&c);
    let crd = manifest(&c, "crd.yaml", CRD);
    k.says(
        &["apply", "-f", &crd],
        "customresourcedefinition.apiextensions.k8s.io/widgets.example.com created",
    );
    k.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/widgets.example.com",
        "--timeout=30s",
    ]);
    k.says(&["get", "crd"], "widgets.example.com");

    // Client-side apply, twice, then a change.
    let w = manifest(&c, "w1.yaml", WIDGET);
    k.says(&["apply", "-f", &w], "widget.example.com/w1 created");
    k.says(&["apply", "-f", &w], "widget.example.com/w1 unchanged");
    let w2 = manifest(&c, "w1b.yaml", &WIDGET.replace("red", "blue"));
    k.says(&["apply", "-f", &w2], "widget.example.com/w1 configured");
    let table = k.ok(&["get", "widgets"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "COLOR", "REPLICAS", "AGE"], "{table}");
    contains(&table, "w1     blue    1");
    k.says(&["get", "wd", "w1", "-o", "jsonpath={.spec.replicas}"], "1");
    k.says(&["get", "all"], "widget.example.com/w1");

    // Validation, scale, patches, explain.
    let bad = manifest(
        &c,
        "bad.yaml",
        &WIDGET.replace("red", "green").replace("w1", "w2"),
    );
    let e = k.fails(&["apply", "-f", &bad]);
    contains(
        &e,
        "Unsupported value: \"green\": supported values: \"red\", \"blue\"",
    );
    k.says(
        &["scale", "widget", "w1", "--replicas=4"],
        "widget.example.com/w1 scaled",
    );
    assert_eq!(k.jsonpath(&["widget", "w1"], "{.spec.replicas}"), "4");
    k.ok(&[
        "patch",
        "widget",
        "w1",
        "--type=merge",
        "-p",
        r#"{"metadata":{"labels":{"tier":"a"}}}"#,
    ]);
    k.says(
        &["get", "widgets", "-l", "tier=a", "-o", "name"],
        "widget.example.com/w1",
    );
    let e = k.fails(&[
        "patch",
        "widget",
        "w1",
        "--type=strategic",
        "-p",
        r#"{"spec":{"color":"red"}}"#,
    ]);
    contains(&e, "the body of the request was in an unknown format");
    let explained = k.ok(&["explain", "widgets.spec"]);
    contains(&explained, "What the widget should be.");
    contains(&explained, "color");

    // Server-side apply of a custom resource and of a large CRD.
    let ssa = manifest(&c, "w3.yaml", &WIDGET.replace("w1", "w3"));
    k.says(
        &["apply", "--server-side", "-f", &ssa],
        "widget.example.com/w3 serverside-applied",
    );
    let big = big_crd(3000);
    assert!(big.len() > 300_000, "{}", big.len());
    let big = manifest(&c, "big.yaml", &big);
    k.says(
        &["apply", "--server-side", "-f", &big],
        "customresourcedefinition.apiextensions.k8s.io/bigs.example.com serverside-applied",
    );
    k.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/bigs.example.com",
        "--timeout=30s",
    ]);
    let b = manifest(
        &c,
        "b.yaml",
        "apiVersion: example.com/v1\nkind: Big\nmetadata:\n  name: b1\nspec:\n  field02999: last\n",
    );
    k.says(&["apply", "-f", &b], "big.example.com/b1 created");

    // The garbage collector follows owner references to custom resources.
    let uid = k.jsonpath(&["widget", "w1"], "{.metadata.uid}");
    let owned = manifest(&c, "owned.yaml", &format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: owned\n  ownerReferences:\n  - {{apiVersion: example.com/v1, kind: Widget, name: w1, uid: {uid}}}\ndata: {{a: b}}\n"
    ));
    k.ok(&["apply", "-f", &owned]);
    k.ok(&["delete", "widget", "w1"]);
    eventually("the owned ConfigMap collected", || {
        !k.run(&["get", "configmap", "owned"]).status.success()
    });

    // Namespace deletion removes custom resources.
    k.ok(&["create", "namespace", "crs"]);
    k.ok(&["apply", "-n", "crs", "-f", &w]);
    k.ok(&["delete", "namespace", "crs", "--timeout=60s"]);
    assert!(!k.run(&["get", "namespace", "crs"]).status.success());

    // Deleting the CRD deletes its objects first.
    k.says(
        &["delete", "crd", "widgets.example.com", "--timeout=60s"],
        "deleted",
    );
    eventually("widgets no longer served", || {
        !k.run(&["get", "--raw", "/apis/example.com/v1/widgets"])
            .status
            .success()
    });
    contains(&k.fails(&["get", "widgets"]), "widgets");
    k.ok(&["apply", "-f", &crd]);
    k.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/widgets.example.com",
        "--timeout=30s",
    ]);
    let left = k.ok(&["get", "widgets", "-A", "-o", "name"]);
    assert!(
        left.trim().is_empty(),
        "objects of the deleted CRD came back: {left}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_client_uses_custom_objects() {
    let Some(python) = crate::streaming::python_client() else {
        return;
    };
    let c = Cluster::start(Opts::default()).await;
    let out = std::process::Command::new(python)
        .arg(rkube_e2e::workspace_root().join("crates/e2e/testdata/python-crd.py"))
        .arg(&c.kubeconfig)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "ESTABLISHED\n",
        "CREATED g1 1\n",
        "GOT g1\n",
        "LISTED ['g1']\n",
        "PATCHED 4 2\n",
        "STATUS True 2\n",
        "WATCHED MODIFIED\n",
        "DELETED 404\n",
    ] {
        contains(&text, line);
    }
}
