//! A watch event shared by every watcher it goes to, serialized at most once per shape.

use std::sync::OnceLock;

use rkube_etcd_api::{Event, EventType, KeyValue, ResponseHeader};

use crate::apply::Change;
use crate::index::Rev;

pub struct EventData {
    pub rev: Rev,
    pub kind: EventType,
    pub kv: KeyValue,
    pub prev: Option<KeyValue>,
    json: OnceLock<String>,
    json_prev: OnceLock<String>,
}

impl EventData {
    pub fn new(rev: Rev, kind: EventType, kv: KeyValue, prev: Option<KeyValue>) -> Self {
        EventData {
            rev,
            kind,
            kv,
            prev,
            json: OnceLock::new(),
            json_prev: OnceLock::new(),
        }
    }

    pub fn from_change(c: &Change) -> Self {
        let kind = if c.record.tombstone {
            EventType::Delete
        } else {
            EventType::Put
        };
        let kv = c.record.to_kv(c.rev.main, false);
        let prev = c.prev.as_ref().map(|(r, rec)| rec.to_kv(r.main, false));
        EventData::new(c.rev, kind, kv, prev)
    }

    pub fn key(&self) -> &[u8] {
        &self.kv.key
    }

    /// The event as JSON, with `prev_kv` only when the watcher asked for it.
    pub fn json(&self, with_prev: bool) -> &str {
        let cell = if with_prev {
            &self.json_prev
        } else {
            &self.json
        };
        cell.get_or_init(|| {
            let ev = Event {
                kind: self.kind,
                kv: Some(self.kv.clone()),
                prev_kv: if with_prev { self.prev.clone() } else { None },
            };
            serde_json::to_string(&ev).unwrap_or_default()
        })
    }
}

/// `{"result":{"header":…,"watch_id":…,"events":[…]}}` built from pre-serialized events.
pub fn events_line(
    header: &ResponseHeader,
    watch_id: i64,
    events: &[std::sync::Arc<EventData>],
    with_prev: bool,
) -> String {
    let mut s = String::with_capacity(
        128 + events
            .iter()
            .map(|e| e.json(with_prev).len() + 1)
            .sum::<usize>(),
    );
    s.push_str("{\"result\":{\"header\":");
    s.push_str(&serde_json::to_string(header).unwrap_or_default());
    if watch_id != 0 {
        s.push_str(&format!(",\"watch_id\":\"{watch_id}\""));
    }
    s.push_str(",\"events\":[");
    for (i, e) in events.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(e.json(with_prev));
    }
    s.push_str("]}}\n");
    s
}
