//! Every open watch, for people to see (`GET /debug/watches`): who watches what — client,
//! user, resource, namespace, selectors — from which resourceVersion it started, the last
//! one it was sent, and how many events, bookmarks and bytes went out, with its age. The
//! seed's point — a filtered watcher kept fresh by bookmarks never re-lists — can be read off
//! it. An entry lives as long as its response stream. Beside them, per client, what the
//! table has counted since the apiserver started: LISTs (a re-list shows here), watches
//! opened, watches refused as expired (410), bookmarks sent.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::{json, Value};

/// Who opened a watch and on what.
#[derive(Clone, Debug, Default)]
pub struct Opened {
    pub user: String,
    /// The client's name (its User-Agent up to the first `/`).
    pub client: String,
    /// `pods`, `deployments.apps`, …
    pub resource: String,
    pub namespace: String,
    pub label_selector: String,
    pub field_selector: String,
    pub start_rv: String,
}

/// One open watch's counters, updated as lines are sent.
pub struct Entry {
    id: u64,
    opened: Opened,
    since: Instant,
    events: AtomicU64,
    bookmarks: AtomicU64,
    bytes: AtomicU64,
    rv: AtomicU64,
    client: Arc<ClientCounts>,
}

/// One client's counters since the apiserver started.
#[derive(Default)]
pub struct ClientCounts {
    lists: AtomicU64,
    watches: AtomicU64,
    expired: AtomicU64,
    bookmarks: AtomicU64,
}

/// Distinct client names counted; later ones are counted under `other`.
const MAX_CLIENTS: usize = 256;

impl Entry {
    /// Counts one sent line (`{"type":…,"object":…}`).
    pub fn sent(&self, line: &crate::cache::object::Line) {
        if line.is_bookmark() {
            self.bookmarks.fetch_add(1, Ordering::Relaxed);
            self.client.bookmarks.fetch_add(1, Ordering::Relaxed);
        } else {
            self.events.fetch_add(1, Ordering::Relaxed);
        }
        self.bytes.fetch_add(line.len() as u64, Ordering::Relaxed);
        if let Some(rv) = resource_version(&line.object) {
            self.rv.fetch_max(rv, Ordering::Relaxed);
        }
    }

    fn to_json(&self) -> Value {
        let o = &self.opened;
        json!({
            "id": self.id,
            "user": o.user,
            "client": o.client,
            "resource": o.resource,
            "namespace": o.namespace,
            "labelSelector": o.label_selector,
            "fieldSelector": o.field_selector,
            "startResourceVersion": o.start_rv,
            "resourceVersion": self.rv.load(Ordering::Relaxed).to_string(),
            "events": self.events.load(Ordering::Relaxed),
            "bookmarks": self.bookmarks.load(Ordering::Relaxed),
            "bytes": self.bytes.load(Ordering::Relaxed),
            "ageSeconds": self.since.elapsed().as_secs(),
        })
    }
}

/// The first `"resourceVersion":"<digits>"` of an event line: the object's own (metadata
/// comes before anything a user wrote; quotes inside strings are escaped, so a value cannot
/// match).
fn resource_version(line: &[u8]) -> Option<u64> {
    const KEY: &[u8] = br#""resourceVersion":""#;
    // On every event sent: a SIMD substring search, not a window-by-window compare.
    let at = memchr::memmem::find(line, KEY)? + KEY.len();
    let digits = line[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&line[at..at + digits])
        .ok()?
        .parse()
        .ok()
}

/// The open watches of this apiserver.
#[derive(Default)]
pub struct WatchTable {
    next: AtomicU64,
    open: Mutex<BTreeMap<u64, Arc<Entry>>>,
    clients: Mutex<BTreeMap<String, Arc<ClientCounts>>>,
}

/// Removes its entry from the table when dropped (with the response stream).
pub struct Registered {
    table: Arc<WatchTable>,
    pub entry: Arc<Entry>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.table.open.lock().unwrap().remove(&self.entry.id);
    }
}

impl WatchTable {
    /// The counters of the client named `name` (bounded: see `MAX_CLIENTS`).
    fn client(&self, name: &str) -> Arc<ClientCounts> {
        let mut clients = self.clients.lock().unwrap();
        if let Some(c) = clients.get(name) {
            return c.clone();
        }
        let name = if clients.len() < MAX_CLIENTS {
            name
        } else {
            "other"
        };
        clients.entry(name.to_string()).or_default().clone()
    }

    /// Counts a LIST by `client`.
    pub fn listed(&self, client: &str) {
        self.client(client).lists.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a watch of `client` refused as expired (410: it must re-list).
    pub fn expired(&self, client: &str) {
        self.client(client).expired.fetch_add(1, Ordering::Relaxed);
    }

    pub fn open(self: &Arc<Self>, opened: Opened) -> Registered {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let client = self.client(&opened.client);
        client.watches.fetch_add(1, Ordering::Relaxed);
        let entry = Arc::new(Entry {
            id,
            opened,
            since: Instant::now(),
            events: AtomicU64::new(0),
            bookmarks: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            rv: AtomicU64::new(0),
            client,
        });
        self.open.lock().unwrap().insert(id, entry.clone());
        Registered {
            table: self.clone(),
            entry,
        }
    }

    /// `{"kind":"WatchList","items":[…],"clients":[…]}`, oldest first, clients by name.
    pub fn to_json(&self) -> Value {
        let items: Vec<Value> = self
            .open
            .lock()
            .unwrap()
            .values()
            .map(|e| e.to_json())
            .collect();
        let clients: Vec<Value> = self
            .clients
            .lock()
            .unwrap()
            .iter()
            .map(|(name, c)| {
                json!({
                    "client": name,
                    "lists": c.lists.load(Ordering::Relaxed),
                    "watches": c.watches.load(Ordering::Relaxed),
                    "expired": c.expired.load(Ordering::Relaxed),
                    "bookmarks": c.bookmarks.load(Ordering::Relaxed),
                })
            })
            .collect();
        json!({"kind": "WatchList", "apiVersion": "rkube.io/v1alpha1", "items": items, "clients": clients})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_count_as_events_or_bookmarks_and_advance_the_resource_version() {
        let t = Arc::new(WatchTable::default());
        t.listed("ctl");
        let w = t.open(Opened {
            client: "ctl".into(),
            resource: "pods".into(),
            label_selector: "app=x".into(),
            ..Default::default()
        });
        use crate::cache::object::{EventType, Line};
        w.entry.sent(&Line::event(
            EventType::Added,
            bytes::Bytes::from_static(br#"{"kind":"Pod","metadata":{"name":"a","resourceVersion":"12","annotations":{"x":"\"resourceVersion\":\"99\""}}}"#),
        ));
        w.entry.sent(&Line::bookmark(bytes::Bytes::from_static(
            br#"{"kind":"Pod","metadata":{"resourceVersion":"30"}}"#,
        )));
        let v = t.to_json();
        let item = &v["items"][0];
        assert_eq!(
            (item["events"].as_u64(), item["bookmarks"].as_u64()),
            (Some(1), Some(1))
        );
        assert_eq!(item["resourceVersion"], "30");
        assert_eq!(item["labelSelector"], "app=x");
        drop(w);
        t.expired("ctl");
        assert_eq!(t.to_json()["items"], json!([]));
        assert_eq!(
            t.to_json()["clients"],
            json!([{"client": "ctl", "lists": 1, "watches": 1, "expired": 1, "bookmarks": 1}])
        );
        for i in 0..MAX_CLIENTS + 10 {
            t.listed(&format!("c{i}"));
        }
        let clients = t.to_json()["clients"].as_array().unwrap().len();
        assert_eq!(clients, MAX_CLIENTS + 1, "bounded, the rest under other");
        assert_eq!(
            resource_version(br#"{"annotations":{"a":"\"resourceVersion\":\"5\""}}"#),
            None
        );
    }
}
