//! Node ports (upstream's `portallocator` over a `RangeAllocation` in storage): the ports in
//! use are one record at `<prefix>/ranges/servicenodeports`, changed only by compare-and-swap,
//! so apiservers sharing a store agree on every port.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{json, Value};

use crate::storage::{Cas, Storage};

/// Compare-and-swap rounds before a busy record is reported (changes within one apiserver
/// are serialized; rounds are lost only to other apiservers).
const MAX_ROUNDS: usize = 64;

pub struct PortAllocator {
    pub range: (u16, u16),
    storage: Arc<Storage>,
    key: String,
    /// One change at a time from this apiserver.
    serial: tokio::sync::Mutex<()>,
}

/// The stored record: the range it was made for and the ports in use.
fn decode(value: &[u8]) -> BTreeSet<u16> {
    serde_json::from_slice::<Value>(value)
        .ok()
        .and_then(|v| v.get("ports").cloned())
        .and_then(|p| serde_json::from_value(p).ok())
        .unwrap_or_default()
}

impl PortAllocator {
    pub fn new(range: (u16, u16), storage: Arc<Storage>, etcd_prefix: &str) -> Self {
        PortAllocator {
            range,
            storage,
            key: format!(
                "{}/ranges/servicenodeports",
                etcd_prefix.trim_end_matches('/')
            ),
            serial: tokio::sync::Mutex::new(()),
        }
    }

    fn encode(&self, ports: &BTreeSet<u16>) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "range": format!("{}-{}", self.range.0, self.range.1),
            "ports": ports,
        }))
        .unwrap_or_default()
    }

    /// The ports in use, as stored.
    pub async fn in_use(&self) -> Result<BTreeSet<u16>, String> {
        let (stored, _) = self
            .storage
            .get(&self.key)
            .await
            .map_err(|e| e.to_string())?;
        Ok(stored.map(|s| decode(&s.value)).unwrap_or_default())
    }

    /// Changes the record with `f` (which returns what to report, or None to write nothing).
    async fn change<T>(
        &self,
        mut f: impl FnMut(&mut BTreeSet<u16>) -> Result<Option<T>, String>,
    ) -> Result<Option<T>, String> {
        let _one = self.serial.lock().await;
        for round in 0..MAX_ROUNDS {
            if round > 0 {
                let jitter = 1 + rand::random::<u64>() % (2 * round as u64).min(20);
                tokio::time::sleep(std::time::Duration::from_millis(jitter)).await;
            }
            let (stored, _) = self
                .storage
                .get(&self.key)
                .await
                .map_err(|e| e.to_string())?;
            let mut ports = stored
                .as_ref()
                .map(|s| decode(&s.value))
                .unwrap_or_default();
            let Some(out) = f(&mut ports)? else {
                return Ok(None);
            };
            let bytes = self.encode(&ports);
            let done = match &stored {
                None => self
                    .storage
                    .create(&self.key, bytes, 0)
                    .await
                    .map_err(|e| e.to_string())?
                    .is_some(),
                Some(s) => matches!(
                    self.storage
                        .update(&self.key, bytes, s.mod_revision, 0)
                        .await
                        .map_err(|e| e.to_string())?,
                    Cas::Done(_)
                ),
            };
            if done {
                return Ok(Some(out));
            }
        }
        Err("the node port allocation record is busy; try again".into())
    }

    /// Takes every port of `asked` (each the port requested, or any) in one change; the
    /// error names the index of the one that could not be had.
    pub async fn allocate_all(
        &self,
        asked: &[Option<u16>],
        dry_run: bool,
    ) -> Result<Vec<u16>, (usize, String)> {
        if asked.is_empty() {
            return Ok(Vec::new());
        }
        let (lo, hi) = self.range;
        for (k, p) in asked.iter().enumerate() {
            if let Some(p) = p {
                if *p < lo || *p > hi {
                    return Err((k, format!(
                        "provided port is not in the valid range. The range of valid ports is {lo}-{hi}"
                    )));
                }
            }
        }
        let range = self.range;
        let pick = |ports: &mut BTreeSet<u16>| -> Result<Vec<u16>, (usize, String)> {
            let mut out = Vec::with_capacity(asked.len());
            for (k, p) in asked.iter().enumerate() {
                let p = match p {
                    Some(p) if ports.contains(p) => {
                        return Err((k, "provided port is already allocated".into()))
                    }
                    Some(p) => *p,
                    None => free_port(ports, range).ok_or((k, "range is full".to_string()))?,
                };
                ports.insert(p);
                out.push(p);
            }
            Ok(out)
        };
        if dry_run {
            let mut used = self.in_use().await.map_err(|e| (0, e))?;
            return pick(&mut used);
        }
        let mut refused = None;
        let r = self
            .change(|ports| match pick(ports) {
                Ok(got) => Ok(Some(got)),
                Err(e) => {
                    refused = Some(e.clone());
                    Err(e.1)
                }
            })
            .await;
        match (r, refused) {
            (Ok(got), _) => Ok(got.unwrap_or_default()),
            (Err(_), Some(e)) => Err(e),
            (Err(e), None) => Err((0, e)),
        }
    }

    /// Gives ports back.
    pub async fn release(&self, ports: &[u16]) {
        if ports.is_empty() {
            return;
        }
        let r = self
            .change(|used| {
                let before = used.len();
                for p in ports {
                    used.remove(p);
                }
                Ok((used.len() != before).then_some(()))
            })
            .await;
        if let Err(e) = r {
            tracing::warn!(?ports, error = %e, "could not release node ports (the repair loop will)");
        }
    }

    /// Replaces the record with `ports` unless it changed meanwhile (the repair loop).
    pub async fn set(
        &self,
        f: impl FnMut(&mut BTreeSet<u16>) -> Result<Option<()>, String>,
    ) -> Result<(), String> {
        self.change(f).await.map(|_| ())
    }
}

/// A random free port of the range, if any: a random start, then the next free one.
fn free_port(used: &BTreeSet<u16>, (lo, hi): (u16, u16)) -> Option<u16> {
    let size = (hi - lo) as u32 + 1;
    let start = rand::random::<u32>() % size;
    (0..size)
        .map(|i| lo + ((start + i) % size) as u16)
        .find(|p| !used.contains(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_stay_in_range() {
        let used: BTreeSet<u16> = (30000..30010).filter(|p| *p != 30007).collect();
        assert_eq!(free_port(&used, (30000, 30009)), Some(30007));
        let full: BTreeSet<u16> = (30000..=30009).collect();
        assert_eq!(free_port(&full, (30000, 30009)), None);
    }
}
