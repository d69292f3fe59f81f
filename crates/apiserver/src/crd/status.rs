//! What a CustomResourceDefinition's status should say (upstream's naming, establishing and
//! finalizing controllers' decisions), as pure functions: which CRDs' names are accepted —
//! decided in creation order, so every apiserver decides alike —, and the conditions.

use serde_json::{json, Value};

/// Whether a CRD's names were accepted, and why not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Naming {
    pub accepted: bool,
    pub reason: String,
    pub message: String,
}

fn names(crd: &Value) -> Vec<(&'static str, String)> {
    let n = |f: &str| {
        crd.pointer(&format!("/spec/names/{f}"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let mut out = vec![
        ("Plural", n("plural")),
        ("Singular", n("singular")),
        ("Kind", n("kind")),
        ("ListKind", n("listKind")),
    ];
    for s in crd
        .pointer("/spec/names/shortNames")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        out.push(("ShortNames", s.to_string()));
    }
    out.retain(|(_, v)| !v.is_empty());
    out
}

fn group(crd: &Value) -> &str {
    crd.pointer("/spec/group")
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn accepted_names(crd: &Value) -> Vec<(&'static str, String)> {
    let mut as_spec = crd.clone();
    as_spec["spec"]["names"] = crd
        .pointer("/status/acceptedNames")
        .cloned()
        .unwrap_or(Value::Null);
    names(&as_spec)
}

/// Decides every CRD's names: names already accepted keep their claim (oldest first), then
/// each CRD's wanted names are checked in creation order (then name) — a resource or kind
/// name another CRD of the group holds, or a built-in resource of the group, is a conflict.
/// Every apiserver decides alike.
pub fn decide(crds: &[Value]) -> Vec<Naming> {
    let mut order: Vec<usize> = (0..crds.len()).collect();
    let created = |c: &Value| {
        (
            c.pointer("/metadata/creationTimestamp")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            rkube_api::meta::name(c).to_string(),
        )
    };
    order.sort_by_key(|i| created(&crds[*i]));
    // (group, is a kind name, lower-cased name) -> who holds it (None: a built-in).
    let mut claimed: std::collections::HashMap<(String, bool, String), Option<usize>> =
        rkube_api::RESOURCES
            .iter()
            .flat_map(|r| {
                [
                    ((r.group.to_string(), false, r.plural.to_string()), None),
                    ((r.group.to_string(), true, r.kind.to_lowercase()), None),
                ]
            })
            .collect();
    let key = |g: &str, what: &str, v: &str| {
        (
            g.to_string(),
            matches!(what, "Kind" | "ListKind"),
            v.to_lowercase(),
        )
    };
    for &i in &order {
        if is_true(&crds[i], "NamesAccepted") {
            let g = group(&crds[i]);
            for (what, v) in accepted_names(&crds[i]) {
                claimed.entry(key(g, what, &v)).or_insert(Some(i));
            }
        }
    }
    let mut out = vec![
        Naming {
            accepted: true,
            reason: String::new(),
            message: String::new()
        };
        crds.len()
    ];
    for i in order {
        let g = group(&crds[i]).to_string();
        let mine = names(&crds[i]);
        let conflict = mine.iter().find(|(what, v)| {
            claimed
                .get(&key(&g, what, v))
                .is_some_and(|holder| *holder != Some(i))
        });
        match conflict {
            Some((what, v)) => {
                out[i] = Naming {
                    accepted: false,
                    reason: format!("{what}Conflict"),
                    message: format!("{:?} is already in use", v),
                }
            }
            None => {
                for (what, v) in mine {
                    claimed.insert(key(&g, what, &v), Some(i));
                }
            }
        }
    }
    out
}

fn condition(kind: &str, status: bool, reason: &str, message: &str, now: &str) -> Value {
    json!({"type": kind, "status": if status { "True" } else { "False" },
        "lastTransitionTime": now, "reason": reason, "message": message})
}

/// The status `crd` should have: its accepted names, `NamesAccepted`, `Established` (once
/// `served`), `Terminating` while its objects are deleted. Conditions whose status did not
/// change keep their transition time; `storedVersions` is kept.
pub fn desired(
    crd: &Value,
    naming: &Naming,
    served: bool,
    terminating: Option<(&str, &str)>,
    now: &str,
) -> Value {
    let old = crd.get("status").cloned().unwrap_or(json!({}));
    let mut status = old.clone();
    if naming.accepted {
        status["acceptedNames"] = crd.pointer("/spec/names").cloned().unwrap_or(json!({}));
    } else if status.get("acceptedNames").is_none() {
        status["acceptedNames"] = json!({"plural": "", "kind": ""});
    }
    let mut conds = vec![if naming.accepted {
        condition(
            "NamesAccepted",
            true,
            "NoConflicts",
            "no conflicts found",
            now,
        )
    } else {
        condition("NamesAccepted", false, &naming.reason, &naming.message, now)
    }];
    // Established stays: a rebuild of the caches (a spec change) does not take it back.
    if naming.accepted && (served || is_true(crd, "Established")) {
        conds.push(condition(
            "Established",
            true,
            "InitialNamesAccepted",
            "the initial names have been accepted",
            now,
        ));
    } else {
        conds.push(condition(
            "Established",
            false,
            "Installing",
            "the initial names have not been accepted",
            now,
        ));
    }
    if let Some((reason, message)) = terminating {
        conds.push(condition("Terminating", true, reason, message, now));
    }
    let old_conds = old
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for c in &mut conds {
        if let Some(prev) = old_conds.iter().find(|p| p["type"] == c["type"]) {
            if prev["status"] == c["status"] {
                c["lastTransitionTime"] = prev["lastTransitionTime"].clone();
            }
        }
    }
    status["conditions"] = json!(conds);
    status
}

/// Whether the condition `kind` is `True` in `crd`'s status.
pub fn is_true(crd: &Value, kind: &str) -> bool {
    crd.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == kind && c["status"] == "True")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd(name: &str, plural: &str, kind: &str, created: &str) -> Value {
        json!({"metadata": {"name": name, "creationTimestamp": created},
            "spec": {"group": "example.com", "names": {"plural": plural, "singular": plural.trim_end_matches('s'), "kind": kind, "listKind": format!("{kind}List")}}})
    }

    #[test]
    fn the_older_definition_keeps_its_names() {
        let a = crd(
            "widgets.example.com",
            "widgets",
            "Widget",
            "2026-01-01T00:00:00Z",
        );
        let b = crd(
            "gizmos.example.com",
            "gizmos",
            "Widget",
            "2026-01-01T00:00:01Z",
        );
        let d = decide(&[b.clone(), a.clone()]);
        assert!(d[1].accepted);
        assert_eq!(
            (d[0].accepted, d[0].reason.as_str()),
            (false, "KindConflict")
        );
        assert_eq!(d[0].message, "\"Widget\" is already in use");
        let mut builtin = crd(
            "deployments.apps",
            "deployments",
            "Dep",
            "2026-01-01T00:00:00Z",
        );
        builtin["spec"]["group"] = json!("apps");
        assert!(!decide(&[builtin])[0].accepted);
    }

    #[test]
    fn conditions_keep_their_transition_times() {
        let a = crd(
            "widgets.example.com",
            "widgets",
            "Widget",
            "2026-01-01T00:00:00Z",
        );
        let ok = Naming {
            accepted: true,
            reason: String::new(),
            message: String::new(),
        };
        let mut with = a.clone();
        with["status"] = desired(&a, &ok, true, None, "T1");
        assert!(is_true(&with, "Established"));
        let again = desired(&with, &ok, true, None, "T2");
        assert_eq!(again["conditions"][1]["lastTransitionTime"], "T1");
        assert_eq!(again["acceptedNames"]["kind"], "Widget");
        let t = desired(
            &with,
            &ok,
            true,
            Some(("InstanceDeletionInProgress", "x")),
            "T3",
        );
        assert_eq!(t["conditions"][2]["type"], "Terminating");
    }
}
