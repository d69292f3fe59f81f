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
    // Benchmarks drive servers over HTTP too (start-bench starts in-process clusters only
    // through `rkube`, whose components still talk HTTP to each other).
    violations.extend(forbid(
        &deps,
        "rkube-bench",
        &["rkube-store", "rkube-apiserver"],
    ));
    // The test-cluster library wraps `rkube::cluster`; it assembles no component itself.
    violations.extend(forbid(
        &deps,
        "rkube-testcluster",
        &[
            "rkube-store",
            "rkube-apiserver",
            "rkube-controller-manager",
            "rkube-scheduler",
            "rkube-kubelet-agent",
        ],
    ));
    assert!(
        violations.is_empty(),
        "dependency rule violations:\n{}",
        violations.join("\n")
    );
}

/// Every `.rs` file under `dir`, with its path relative to `dir`.
fn rust_files(dir: &std::path::Path) -> Vec<(std::path::PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(dir).unwrap().to_path_buf();
                out.push((rel, std::fs::read_to_string(&p).unwrap()));
            }
        }
    }
    out
}

/// A file's code without its unit tests (everything from the first `#[cfg(test)]`) and
/// without comments (`//`, `///`, `//!` lines and line ends).
fn without_tests(text: &str) -> String {
    let code = match text.find("#[cfg(test)]") {
        Some(i) => &text[..i],
        None => text,
    };
    code.lines()
        .map(|l| match l.find("//") {
            // A `//` inside a string literal ("http://…") is kept.
            Some(i) if l[..i].matches('"').count() % 2 == 0 => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn workspace_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The top-level module a file of `src/` belongs to (`None` for the crate root and binaries).
fn top_module(rel: &std::path::Path) -> Option<String> {
    let first = rel.components().next()?.as_os_str().to_str()?.to_string();
    if rel.components().count() == 1 {
        let stem = first.trim_end_matches(".rs");
        return (!matches!(stem, "lib" | "main")).then(|| stem.to_string());
    }
    (first != "bin").then_some(first)
}

/// `a -> b` edges between the top-level modules of one crate, from `crate::b` paths in a's
/// non-test code.
fn module_edges(src: &std::path::Path) -> BTreeMap<String, BTreeSet<String>> {
    let files = rust_files(src);
    let modules: BTreeSet<String> = files.iter().filter_map(|(r, _)| top_module(r)).collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (rel, text) in &files {
        let Some(from) = top_module(rel) else {
            continue;
        };
        if rel.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let code = without_tests(text);
        let code = code.as_str();
        for (i, _) in code.match_indices("crate::") {
            let rest = &code[i + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if name != from && modules.contains(&name) {
                edges.entry(from.clone()).or_default().insert(name);
            }
        }
        // `use crate::{a, b::c}` groups.
        for (i, _) in code.match_indices("use crate::{") {
            let rest = &code[i + "use crate::{".len()..];
            let group = &rest[..rest.find("};").unwrap_or(rest.len())];
            for part in group.split(',') {
                let name: String = part
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if name != from && modules.contains(&name) {
                    edges.entry(from.clone()).or_default().insert(name);
                }
            }
        }
    }
    edges
}

#[test]
fn no_two_modules_import_each_other() {
    let root = workspace_root();
    let mut cycles = Vec::new();
    for e in std::fs::read_dir(root.join("crates")).unwrap().flatten() {
        let src = e.path().join("src");
        if !src.is_dir() {
            continue;
        }
        let edges = module_edges(&src);
        for (a, outs) in &edges {
            for b in outs {
                if a < b && edges.get(b).is_some_and(|o| o.contains(a)) {
                    cycles.push(format!(
                        "{}: {a} and {b} import each other",
                        e.file_name().to_string_lossy()
                    ));
                }
            }
        }
    }
    assert!(cycles.is_empty(), "module cycles:\n{}", cycles.join("\n"));
}

#[test]
fn the_request_info_sits_below_auth_and_http() {
    let src = workspace_root().join("crates/apiserver/src");
    let edges = module_edges(&src);
    let request = edges.get("request").cloned().unwrap_or_default();
    assert!(
        request.is_empty(),
        "the request info must not depend on other modules: {request:?}"
    );
    for m in ["chain", "http"] {
        assert!(
            edges.get(m).is_some_and(|e| e.contains("request")),
            "{m} reads the one request info"
        );
    }
    let auth = edges.get("auth").cloned().unwrap_or_default();
    assert!(
        !auth.contains("http") && !auth.contains("chain"),
        "auth must not import http or the chain: {auth:?}"
    );
}

/// Kind names (from the kinds table) appearing in a comparison or a match arm.
fn kind_matches(code: &str, kinds: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    for k in kinds {
        let q = format!("\"{k}\"");
        for pat in [
            format!("== {q}"),
            format!("!= {q}"),
            format!("{q} =>"),
            format!("{q} |"),
            format!("| {q}"),
        ] {
            if code.contains(&pat) {
                found.push(pat);
            }
        }
    }
    found
}

#[test]
fn no_kind_is_named_outside_kinds() {
    let src = workspace_root().join("crates/apiserver/src");
    let table = std::fs::read_to_string(src.join("kinds/mod.rs")).unwrap();
    // The `("group", "Kind", &strategy)` rows of KINDS: its string literals come in pairs.
    let start = table.find("pub static KINDS").expect("the KINDS table");
    let rows = &table[start..start + table[start..].find("];").unwrap()];
    let literals: Vec<&str> = rows.split('"').skip(1).step_by(2).collect();
    let kinds: Vec<String> = literals
        .chunks(2)
        .filter_map(|pair| pair.get(1).map(|k| k.to_string()))
        .collect();
    assert!(kinds.len() >= 19, "kinds found in the table: {kinds:?}");
    // Words that are kind names but name something else here.
    let not_kinds = [
        // `--authorization-mode=Node`.
        ("auth/mod.rs", "\"Node\" =>"),
        // A FlowSchema subject's kind (User, Group, ServiceAccount), not a served resource.
        ("flowcontrol/defaults.rs", "\"ServiceAccount\" =>"),
    ];
    let mut offenders = Vec::new();
    for (rel, text) in rust_files(&src) {
        if rel.starts_with("kinds") || rel.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        for m in kind_matches(&without_tests(&text), &kinds) {
            let file = rel.to_string_lossy();
            if !not_kinds.iter().any(|(f, p)| *f == file && *p == m) {
                offenders.push(format!("{file}: {m}"));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "kind names outside kinds/:\n{}",
        offenders.join("\n")
    );
}
