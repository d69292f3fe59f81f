//! A watch event shared by every watcher it goes to, serialized at most once per encoding and
//! shape; and how a watch stream's responses are encoded for its wire (the JSON gateway's
//! `{"result":…}` lines, or gRPC's protobuf messages).

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use prost::Message;
use rkube_etcd_api::pb;
use rkube_etcd_api::{Event, EventType, KeyValue, ResponseHeader, StreamLine, WatchResponse};

/// How a watch stream's client reads responses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Wire {
    /// The JSON gateway: one `{"result":…}` line per response.
    Json,
    /// gRPC: one protobuf `WatchResponse` per message (framed by tonic).
    Proto,
}

/// One response (not events: see `encode_events`) as its wire carries it.
pub fn encode_response(wire: Wire, resp: &WatchResponse) -> Bytes {
    match wire {
        Wire::Json => {
            let mut s = serde_json::to_string(&StreamLine {
                result: Some(resp),
                error: None,
            })
            .unwrap_or_default();
            s.push('\n');
            Bytes::from(s)
        }
        Wire::Proto => Bytes::from(pb::WatchResponse::from(resp.clone()).encode_to_vec()),
    }
}

/// A response carrying `events` for one watch, built from each event's cached encoding.
pub fn encode_events(
    wire: Wire,
    header: &ResponseHeader,
    watch_id: i64,
    events: &[Arc<EventData>],
    with_prev: bool,
) -> Bytes {
    match wire {
        Wire::Json => Bytes::from(events_line(header, watch_id, events, with_prev)),
        Wire::Proto => events_proto(header, watch_id, events, with_prev),
    }
}

/// `WatchResponse{header, watch_id, events}` in protobuf: the head is encoded, then each
/// event's cached bytes are appended as field 11 (protobuf allows fields in any order; this
/// is the order etcd writes them in, too).
fn events_proto(
    header: &ResponseHeader,
    watch_id: i64,
    events: &[Arc<EventData>],
    with_prev: bool,
) -> Bytes {
    let head = pb::WatchResponse {
        header: Some(header.clone().into()),
        watch_id,
        ..Default::default()
    };
    let body: usize = events
        .iter()
        .map(|e| {
            let n = e.proto(with_prev).len();
            1 + prost::encoding::encoded_len_varint(n as u64) + n
        })
        .sum();
    let mut buf = bytes::BytesMut::with_capacity(head.encoded_len() + body);
    head.encode_raw(&mut buf);
    for e in events {
        let ev = e.proto(with_prev);
        prost::encoding::encode_key(11, prost::encoding::WireType::LengthDelimited, &mut buf);
        prost::encoding::encode_varint(ev.len() as u64, &mut buf);
        buf.extend_from_slice(ev);
    }
    buf.freeze()
}

use crate::apply::Change;
use crate::index::Rev;

pub struct EventData {
    pub rev: Rev,
    pub kind: EventType,
    pub kv: KeyValue,
    pub prev: Option<KeyValue>,
    json: OnceLock<String>,
    json_prev: OnceLock<String>,
    proto: OnceLock<Vec<u8>>,
    proto_prev: OnceLock<Vec<u8>>,
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
            proto: OnceLock::new(),
            proto_prev: OnceLock::new(),
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
        cell.get_or_init(|| serde_json::to_string(&self.event(with_prev)).unwrap_or_default())
    }
}

impl EventData {
    fn event(&self, with_prev: bool) -> Event {
        Event {
            kind: self.kind,
            kv: Some(self.kv.clone()),
            prev_kv: if with_prev { self.prev.clone() } else { None },
        }
    }

    /// The event as a protobuf `mvccpb.Event`, with `prev_kv` only when asked for.
    pub fn proto(&self, with_prev: bool) -> &[u8] {
        let cell = if with_prev {
            &self.proto_prev
        } else {
            &self.proto
        };
        cell.get_or_init(|| pb::Event::from(self.event(with_prev)).encode_to_vec())
    }
}

/// `{"result":{"header":…,"watch_id":…,"events":[…]}}` built from pre-serialized events.
fn events_line(
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
