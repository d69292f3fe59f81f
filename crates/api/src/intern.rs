//! Interned strings and resource definitions for what is only known at run time (custom
//! resources): the served tables hold `&'static` data, so a CustomResourceDefinition's names
//! are leaked once and reused. Entries are deduplicated by content, so creating and deleting
//! the same definition again costs nothing more; what is held grows only with distinct
//! definitions, each of which took a write by someone allowed to define resources.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

use crate::resources::ResourceDef;

fn strings() -> &'static Mutex<HashSet<&'static str>> {
    static S: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    S.get_or_init(Default::default)
}

/// `s` as a `&'static str`, the same pointer for equal strings.
pub fn str(s: &str) -> &'static str {
    let mut set = strings().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(found) = set.get(s) {
        return found;
    }
    let leaked: &'static str = Box::leak(s.to_string().into_boxed_str());
    set.insert(leaked);
    leaked
}

/// A slice of strings, interned as a whole.
pub fn strs(items: &[&str]) -> &'static [&'static str] {
    static S: OnceLock<Mutex<HashSet<&'static [&'static str]>>> = OnceLock::new();
    let owned: Vec<&'static str> = items.iter().map(|s| str(s)).collect();
    let mut set = S
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(found) = set.get(owned.as_slice()) {
        return found;
    }
    let leaked: &'static [&'static str] = Box::leak(owned.into_boxed_slice());
    set.insert(leaked);
    leaked
}

/// A kind's list overrides (a custom resource's, from its schema), interned.
pub fn list_overrides(
    items: Vec<crate::strategic::ListOverride>,
) -> &'static [crate::strategic::ListOverride] {
    type Slice = &'static [crate::strategic::ListOverride];
    static S: OnceLock<Mutex<HashSet<Slice>>> = OnceLock::new();
    let mut set = S
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(found) = set.get(items.as_slice()) {
        return found;
    }
    let leaked: Slice = Box::leak(items.into_boxed_slice());
    set.insert(leaked);
    leaked
}

/// A resource definition, interned.
pub fn def(d: ResourceDef) -> &'static ResourceDef {
    static S: OnceLock<Mutex<HashSet<&'static ResourceDef>>> = OnceLock::new();
    let mut set = S
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(found) = set.get(&d) {
        return found;
    }
    let leaked: &'static ResourceDef = Box::leak(Box::new(d));
    set.insert(leaked);
    leaked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_content_is_one_allocation() {
        let a = str(&String::from("widgets"));
        let b = str("widgets");
        assert!(std::ptr::eq(a, b));
        let x = strs(&["a", "b"]);
        assert!(std::ptr::eq(x, strs(&["a", "b"])));
        assert!(!std::ptr::eq(x, strs(&["a"])));
    }
}
