//! Taints and tolerations: whether a toleration tolerates a taint (upstream's
//! `Toleration.ToleratesTaint`).

use k8s_openapi::api::core::v1::{Taint, Toleration};

pub fn tolerates(tol: &Toleration, taint: &Taint) -> bool {
    let effect_ok = tol
        .effect
        .as_deref()
        .is_none_or(|e| e.is_empty() || e == taint.effect);
    let key_ok = match tol.key.as_deref() {
        None | Some("") => tol.operator.as_deref() == Some("Exists"),
        Some(k) => k == taint.key,
    };
    let value_ok = match tol.operator.as_deref() {
        Some("Exists") => true,
        _ => tol.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
    };
    effect_ok && key_ok && value_ok
}

/// Whether any of `tols` tolerates `taint`.
pub fn tolerated(tols: &[Toleration], taint: &Taint) -> bool {
    tols.iter().any(|t| tolerates(t, taint))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: value.map(Into::into),
            effect: effect.into(),
            time_added: None,
        }
    }

    fn tol(key: Option<&str>, op: &str, value: Option<&str>, effect: Option<&str>) -> Toleration {
        Toleration {
            key: key.map(Into::into),
            operator: Some(op.into()),
            value: value.map(Into::into),
            effect: effect.map(Into::into),
            toleration_seconds: None,
        }
    }

    #[test]
    fn matching_rules() {
        let t = taint("dedicated", Some("gpu"), "NoSchedule");
        assert!(tolerates(
            &tol(Some("dedicated"), "Equal", Some("gpu"), Some("NoSchedule")),
            &t
        ));
        assert!(!tolerates(
            &tol(Some("dedicated"), "Equal", Some("cpu"), Some("NoSchedule")),
            &t
        ));
        assert!(tolerates(&tol(Some("dedicated"), "Exists", None, None), &t));
        assert!(!tolerates(
            &tol(Some("dedicated"), "Exists", None, Some("NoExecute")),
            &t
        ));
        assert!(
            tolerates(&tol(None, "Exists", None, None), &t),
            "empty key + Exists tolerates everything"
        );
        assert!(!tolerates(&tol(Some("other"), "Exists", None, None), &t));
    }
}
