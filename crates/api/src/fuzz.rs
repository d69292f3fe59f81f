//! Entry points shared by the fuzz targets (`fuzz/`, cargo-fuzz) and by the test that replays
//! their committed corpora and crash regressions (`fuzz/corpus`, `fuzz/regressions`) on every
//! test run. Each takes arbitrary bytes and must return — an error is fine — without
//! panicking, hanging or building an object beyond `crate::bounds`.

use serde_json::Value;

use crate::managed::{self, Scope, Writer};
use crate::patch::{self, PatchKind};
use crate::strategic::{ListStrategy, Lists};

/// Kubernetes protobuf request bodies.
pub fn protobuf(data: &[u8]) {
    if let Ok(v) = crate::proto::decode(data) {
        let _ = serde_json::to_vec(&v);
    }
}

/// Label and field selectors, and query strings.
pub fn selectors(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(l) = crate::LabelSelector::parse(s) {
        let _ = l.to_string();
    }
    if let Ok(f) = crate::FieldSelector::parse(s) {
        let _ = f.to_string();
    }
    let _ = crate::Query::parse(s);
}

/// Continue tokens.
pub fn continue_token(data: &[u8]) {
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = crate::continue_token::decode(s);
    }
}

/// JSON bodies: decoding within the bounds, and duplicate detection.
pub fn body(data: &[u8]) {
    let _ = crate::decode::json(data);
    let _ = crate::decode::duplicate_fields(data, crate::decode::MAX_REPORTED);
}

/// Two JSON documents in one input, split at the first newline.
fn two_documents(data: &[u8]) -> Option<(Value, Value)> {
    let i = data.iter().position(|b| *b == b'\n')?;
    let a = crate::decode::json(&data[..i]).ok()?;
    let b = crate::decode::json(&data[i + 1..]).ok()?;
    Some((a, b))
}

/// The lists of a kind with an exception of its own (a Service's ports by `port`).
const KEYED: Lists = Lists(&[("spec", "ports", ListStrategy::MergeByKey("port"))]);

fn check_patched(result: Result<Value, patch::PatchError>) {
    if let Ok(v) = result {
        assert!(
            crate::bounds::check(&v).is_ok(),
            "a patch result broke the bounds"
        );
    }
}

/// JSON patch: a document, a newline, a patch.
pub fn json_patch(data: &[u8]) {
    if let Some((doc, p)) = two_documents(data) {
        check_patched(patch::apply(PatchKind::Json, Lists::GENERIC, &doc, &p));
    }
}

/// Strategic merge and merge patches: a document, a newline, a patch.
pub fn strategic(data: &[u8]) {
    if let Some((doc, p)) = two_documents(data) {
        check_patched(patch::apply(PatchKind::Strategic, KEYED, &doc, &p));
        check_patched(patch::apply(PatchKind::Merge, Lists::GENERIC, &doc, &p));
    }
}

/// Server-side apply and managed fields: a live object, a newline, an applied configuration.
pub fn apply(data: &[u8]) {
    let Some((live, config)) = two_documents(data) else {
        return;
    };
    if !live.is_object() || !config.is_object() {
        return;
    }
    let who = |m| Writer {
        manager: m,
        api_version: "v1",
        time: "2026-01-01T00:00:00Z",
        scope: Scope::Main,
    };
    if let Ok(mut merged) = managed::apply(KEYED, Some(&live), &config, who("a"), false) {
        managed::record_update(KEYED, Some(&live), &mut merged, who("b"));
        let _ = managed::apply(KEYED, Some(&merged), &config, who("c"), true);
    }
    let _ = managed::apply(KEYED, None, &config, who("a"), false);
}

/// Replays every input under `fuzz/corpus/<target>` and `fuzz/regressions/<target>`.
#[cfg(test)]
pub fn replay(target: &str, run: fn(&[u8])) -> usize {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut n = 0;
    for dir in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(data) = std::fs::read(e.path()) else {
                continue;
            };
            run(&data);
            n += 1;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fuzz_corpora_and_regressions_replay() {
        type Target = (&'static str, fn(&[u8]));
        let targets: [Target; 7] = [
            ("protobuf", protobuf),
            ("selectors", selectors),
            ("continue_token", continue_token),
            ("body", body),
            ("json_patch", json_patch),
            ("strategic", strategic),
            ("apply", apply),
        ];
        for (name, run) in targets {
            let n = replay(name, run);
            assert!(n > 0, "no committed corpus for {name}");
        }
    }
}
