//! Checks the crate dependency rules of `shared/DESIGN.md` §3 against `cargo metadata`, so a
//! forbidden edge (the apiserver linking the store, a controller linking the scheduler, an
//! async runtime in `rkube-api`) fails the build's tests instead of creeping in.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// package name → its normal (non-dev) dependency names.
fn workspace_deps() -> BTreeMap<String, BTreeSet<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata JSON");
    let mut map = BTreeMap::new();
    for pkg in meta["packages"].as_array().expect("packages") {
        let name = pkg["name"].as_str().unwrap().to_string();
        let deps = pkg["dependencies"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["kind"].is_null()) // normal dependencies only
            .map(|d| d["name"].as_str().unwrap().to_string())
            .collect();
        map.insert(name, deps);
    }
    map
}

fn forbid(deps: &BTreeMap<String, BTreeSet<String>>, pkg: &str, forbidden: &[&str]) -> Vec<String> {
    let Some(d) = deps.get(pkg) else {
        return Vec::new();
    };
    forbidden
        .iter()
        .filter(|f| d.contains(**f))
        .map(|f| format!("{pkg} must not depend on {f}"))
        .collect()
}

#[test]
fn crate_dependency_rules_hold() {
    let deps = workspace_deps();
    assert!(
        deps.contains_key("rkube-store"),
        "workspace packages: {:?}",
        deps.keys()
    );
    let mut violations = Vec::new();
    // rkube-api: types and pure functions, no runtime or HTTP.
    violations.extend(forbid(
        &deps,
        "rkube-api",
        &["tokio", "hyper", "reqwest", "axum", "hyper-util"],
    ));
    // The store knows nothing of Kubernetes.
    violations.extend(forbid(
        &deps,
        "rkube-store",
        &[
            "rkube-api",
            "k8s-openapi",
            "rkube-client",
            "rkube-apiserver",
        ],
    ));
    if let Some(d) = deps.get("rkube-store") {
        if !d.contains("rkube-etcd-api") {
            violations.push("rkube-store must use rkube-etcd-api for its wire types".into());
        }
    }
    // The apiserver reaches storage over HTTP only.
    violations.extend(forbid(&deps, "rkube-apiserver", &["rkube-store"]));
    // The client library sits on api only.
    violations.extend(forbid(
        &deps,
        "rkube-client",
        &["rkube-apiserver", "rkube-store"],
    ));
    // Components never link each other, the apiserver or the store.
    let components = [
        "rkube-controller-manager",
        "rkube-scheduler",
        "rkube-kubelet-agent",
    ];
    for c in components {
        let mut others: Vec<&str> = components.iter().copied().filter(|o| *o != c).collect();
        others.extend(["rkube-apiserver", "rkube-store"]);
        violations.extend(forbid(&deps, c, &others));
    }
    // e2e drives real processes.
    violations.extend(forbid(
        &deps,
        "rkube-e2e",
        &[
            "rkube-apiserver",
            "rkube-store",
            "rkube-controller-manager",
            "rkube-scheduler",
            "rkube-kubelet-agent",
        ],
    ));
    // Test support is for tests only.
    for (pkg, _) in deps.iter() {
        violations.extend(forbid(&deps, pkg, &["rkube-testkit"]));
    }
    // Benchmarks drive servers over HTTP too.
    violations.extend(forbid(
        &deps,
        "rkube-bench",
        &["rkube-store", "rkube-apiserver"],
    ));
    assert!(
        violations.is_empty(),
        "dependency rule violations:\n{}",
        violations.join("\n")
    );
}
