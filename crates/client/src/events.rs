//! The event recorder: core/v1 Events about objects, sent in the background and aggregated as
//! upstream's recorder does — the same (object, type, reason, message, source) again bumps
//! `count` and `lastTimestamp` of the existing Event instead of creating another — and
//! spam-filtered like upstream's `EventSourceObjectSpamFilter`: per (source, object) a bucket of
//! 25 events refilled at one per five minutes, so a 10,000-replica scale-up writes 25 events,
//! not 10,000.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::ratelimit::TokenBucket;
use crate::{Api, Client, Patch, Resource};

/// A reference to `obj` for `involvedObject`.
pub fn object_ref<K: Resource>(obj: &K) -> ObjectReference {
    let m = obj.metadata();
    ObjectReference {
        api_version: Some(K::API_VERSION.to_string()),
        kind: Some(K::KIND.to_string()),
        name: m.name.clone(),
        namespace: m.namespace.clone(),
        uid: m.uid.clone(),
        resource_version: m.resource_version.clone(),
        field_path: None,
    }
}

struct Pending {
    component: Arc<str>,
    host: Option<Arc<str>>,
    regarding: ObjectReference,
    type_: &'static str,
    reason: String,
    message: String,
    /// When it was recorded: its timestamps and name say so, however long it queued (as
    /// upstream's recorder stamps an event when it makes it, not when it is written).
    at: k8s_openapi::chrono::DateTime<k8s_openapi::chrono::Utc>,
}

/// Cheap to clone; events go through a bounded channel and are dropped (with a log line) when
/// it is full, as upstream drops them rather than block a controller.
/// Per (object, reason) spam-filter buckets.
type SpamBuckets = HashMap<(Arc<str>, String), TokenBucket>;

#[derive(Clone)]
pub struct Recorder {
    tx: mpsc::Sender<Pending>,
    component: Arc<str>,
    host: Option<Arc<str>>,
    spam: Arc<Mutex<SpamBuckets>>,
    /// An overall events-per-second limit (a kubelet's `--event-qps`), shared by clones.
    rate: Option<Arc<TokenBucket>>,
}

static DROPPED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

const SPAM_BURST: u32 = 25;
const SPAM_QPS: f32 = 1.0 / 300.0;

impl Recorder {
    /// Starts the sender task for `component` (the `source.component`), on `host` if given.
    pub fn new(
        client: &Client,
        component: &str,
        host: Option<&str>,
        shutdown: CancellationToken,
    ) -> Self {
        let (tx, rx) = mpsc::channel(1000);
        let sender = Sender {
            client: client.clone(),
            source: EventSource {
                component: Some(component.to_string()),
                host: host.map(str::to_string),
            },
            seen: Mutex::new(HashMap::new()),
        };
        tokio::spawn(sender.run(rx, shutdown));
        Recorder {
            tx,
            component: component.into(),
            host: None,
            spam: Arc::default(),
            rate: None,
        }
    }

    /// Limits this recorder and its clones to `qps` events per second (burst `burst`); events
    /// over the limit are dropped. `qps <= 0` means no limit.
    pub fn with_rate(mut self, qps: f32, burst: u32) -> Self {
        self.rate = (qps > 0.0).then(|| Arc::new(TokenBucket::new(qps, burst)));
        self
    }

    /// A recorder writing with another client (another identity: a simulated node's own
    /// credentials) from `host`, sharing this one's overall rate limit.
    pub fn for_client(&self, client: &Client, host: &str, shutdown: CancellationToken) -> Self {
        Recorder {
            rate: self.rate.clone(),
            ..Recorder::new(client, &self.component, None, shutdown)
        }
        .for_host(host)
    }

    /// The same sender, reporting from another host (`source.host`; a simulated node).
    pub fn for_host(&self, host: &str) -> Self {
        Recorder {
            host: Some(host.into()),
            ..self.clone()
        }
    }

    /// The same sender, reporting as another component (`source.component`).
    pub fn for_component(&self, component: &str) -> Self {
        Recorder {
            component: component.into(),
            ..self.clone()
        }
    }

    pub fn normal(&self, regarding: ObjectReference, reason: &str, message: String) {
        self.event(regarding, "Normal", reason, message);
    }

    pub fn warning(&self, regarding: ObjectReference, reason: &str, message: String) {
        self.event(regarding, "Warning", reason, message);
    }

    pub fn event(
        &self,
        regarding: ObjectReference,
        type_: &'static str,
        reason: &str,
        message: String,
    ) {
        let obj = format!(
            "{}/{}/{}/{}",
            regarding.kind.as_deref().unwrap_or_default(),
            regarding.namespace.as_deref().unwrap_or_default(),
            regarding.name.as_deref().unwrap_or_default(),
            regarding.uid.as_deref().unwrap_or_default()
        );
        {
            let mut spam = self.spam.lock().unwrap();
            if spam.len() > 4096 {
                spam.clear();
            }
            let bucket = spam
                .entry((self.component.clone(), obj))
                .or_insert_with(|| TokenBucket::new(SPAM_QPS, SPAM_BURST));
            if !bucket.try_take() {
                tracing::debug!(reason, "event dropped by the spam filter");
                return;
            }
        }
        if self.rate.as_ref().is_some_and(|r| !r.try_take()) {
            tracing::debug!(reason, "event dropped by the rate limit");
            return;
        }
        let p = Pending {
            component: self.component.clone(),
            host: self.host.clone(),
            regarding,
            type_,
            reason: reason.to_string(),
            message,
            at: crate::now(),
        };
        if self.tx.try_send(p).is_err() {
            // Like upstream's broadcaster: drop rather than block the caller; say so sparingly.
            let n = DROPPED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if n.is_multiple_of(1000) {
                tracing::warn!(
                    reason,
                    dropped = n + 1,
                    "events dropped: recorder queue full"
                );
            }
        }
    }
}

type Key = (
    String,
    String,
    String,
    String,
    &'static str,
    String,
    String,
    Arc<str>,
);

struct Sender {
    client: Client,
    source: EventSource,
    /// Aggregation key → the Event written for it (namespace, name, count, last timestamp),
    /// behind a lock per key: one key's events are written one after another, their count and
    /// lastTimestamp read and written under it (upstream's correlator updates under its lock).
    seen: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<Option<Seen>>>>>,
}

type Seen = (String, String, i32, Time);

/// Keys kept in `seen`; beyond it, those not being written are forgotten.
const KEYS_KEPT: usize = 4096;

/// Events written at once: enough for a scheduler binding thousands of pods a second.
const IN_FLIGHT: usize = 32;

impl Sender {
    async fn run(self, mut rx: mpsc::Receiver<Pending>, shutdown: CancellationToken) {
        let me = Arc::new(self);
        let permits = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
        loop {
            let p = tokio::select! {
                _ = shutdown.cancelled() => return,
                p = rx.recv() => match p { Some(p) => p, None => return },
            };
            let Ok(permit) = permits.clone().acquire_owned().await else {
                return;
            };
            let me = me.clone();
            tokio::spawn(async move {
                if let Err(e) = me.send(p).await {
                    tracing::warn!(error = %e, "could not write event");
                }
                drop(permit);
            });
        }
    }

    async fn send(&self, p: Pending) -> Result<(), crate::Error> {
        let r = &p.regarding;
        let ns = r
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".into());
        let key: Key = (
            ns.clone(),
            r.kind.clone().unwrap_or_default(),
            r.name.clone().unwrap_or_default(),
            r.uid.clone().unwrap_or_default(),
            p.type_,
            p.reason.clone(),
            p.message.clone(),
            p.component.clone(),
        );
        let entry = {
            let mut seen = self.seen.lock().unwrap();
            if seen.len() >= KEYS_KEPT {
                seen.retain(|_, e| Arc::strong_count(e) > 1); // keep those in use
            }
            seen.entry(key).or_default().clone()
        };
        let mut known = entry.lock().await;
        let now = p.at;
        let source = EventSource {
            component: Some(p.component.to_string()),
            host: p
                .host
                .as_deref()
                .map(str::to_string)
                .or_else(|| self.source.host.clone()),
        };
        let api: Api<Event> = Api::namespaced(&self.client, &ns);
        if let Some((ens, name, count, last)) = known.clone() {
            // Recorded earlier than the last one written (two senders raced to the lock): the
            // count goes up, the time does not go back.
            let last = Time(now).max(last);
            let patch = json!({"count": count + 1, "lastTimestamp": last});
            match Api::<Event>::namespaced(&self.client, &ens)
                .patch(&name, &Patch::Merge(patch))
                .await
            {
                Ok(_) => {
                    *known = Some((ens, name, count + 1, last));
                    return Ok(());
                }
                Err(e) if e.is_not_found() => *known = None,
                Err(e) => return Err(e),
            }
        }
        let name = format!(
            "{}.{:x}",
            r.name.as_deref().unwrap_or("unknown"),
            now.timestamp_nanos_opt().unwrap_or_default()
        );
        let ev = Event {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(ns.clone()),
                ..Default::default()
            },
            involved_object: p.regarding.clone(),
            reason: Some(p.reason),
            message: Some(p.message),
            type_: Some(p.type_.to_string()),
            source: Some(source.clone()),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            event_time: None::<MicroTime>,
            count: Some(1),
            reporting_component: source.component.clone(),
            reporting_instance: source.host.clone(),
            ..Default::default()
        };
        api.create(&ev).await?;
        *known = Some((ns, name, 1, Time(now)));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// A server that answers nothing until `gate` opens, then takes every request (method and
    /// JSON body, in the order they arrive): a create is echoed with 201, anything else gets
    /// a bare Event.
    async fn gated_echo(
        gate: Arc<tokio::sync::Notify>,
    ) -> (String, mpsc::UnboundedReceiver<(String, serde_json::Value)>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            gate.notified().await;
            while let Ok((mut conn, _)) = listener.accept().await {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let Some((head, body)) = crate::testserver::read_request(&mut conn).await
                    else {
                        return;
                    };
                    let method = head.split(' ').next().unwrap_or_default().to_string();
                    let answer = match method.as_str() {
                        "POST" => body.clone(),
                        _ => br#"{"metadata": {"name": "e"}, "involvedObject": {}}"#.to_vec(),
                    };
                    let _ = tx.send((method, serde_json::from_slice(&body).unwrap_or_default()));
                    let head = format!(
                        "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        answer.len()
                    );
                    let _ = conn.write_all(head.as_bytes()).await;
                    let _ = conn.write_all(&answer).await;
                });
            }
        });
        (base, rx)
    }

    async fn next(
        written: &mut mpsc::UnboundedReceiver<(String, serde_json::Value)>,
    ) -> (String, serde_json::Value) {
        tokio::time::timeout(std::time::Duration::from_secs(30), written.recv())
            .await
            .expect("written in time")
            .unwrap()
    }

    #[tokio::test]
    async fn one_events_repeats_are_one_event_counted_in_order() {
        let gate = Arc::new(tokio::sync::Notify::new());
        let (base, mut written) = gated_echo(gate.clone()).await;
        let stop = CancellationToken::new();
        let rec = Recorder::new(&Client::for_server(&base), "test", None, stop.clone());
        let obj = ObjectReference {
            kind: Some("Pod".into()),
            namespace: Some("a".into()),
            name: Some("p".into()),
            ..Default::default()
        };
        for _ in 0..5 {
            rec.warning(obj.clone(), "BackOff", "restarting".into());
        }
        gate.notify_one();
        let (method, created) = next(&mut written).await;
        assert_eq!(method, "POST", "one Event created, the rest counted on it");
        let mut last = created["lastTimestamp"].as_str().unwrap().to_string();
        for n in 2..=5 {
            let (method, patch) = next(&mut written).await;
            assert_eq!(
                (method.as_str(), patch["count"].as_i64()),
                ("PATCH", Some(n))
            );
            let at = patch["lastTimestamp"].as_str().unwrap().to_string();
            assert!(at >= last, "lastTimestamp went back: {at} after {last}");
            last = at;
        }
        stop.cancel();
    }

    #[tokio::test]
    async fn events_are_stamped_when_recorded_not_when_sent() {
        let gate = Arc::new(tokio::sync::Notify::new());
        let (base, mut written) = gated_echo(gate.clone()).await;
        let client = Client::for_server(&base);
        let stop = CancellationToken::new();
        let rec = Recorder::new(&client, "test", None, stop.clone());
        // More events than the sender writes at once, so the last ones queue behind the
        // stalled server; each about its own object (the spam filter counts per object).
        let n = IN_FLIGHT + 4;
        let before = crate::now();
        for i in 0..n {
            let obj = ObjectReference {
                kind: Some("Pod".into()),
                namespace: Some("a".into()),
                name: Some(format!("p{i}")),
                ..Default::default()
            };
            rec.normal(obj, "Started", "started".into());
        }
        let recorded = crate::now();
        gate.notify_one();
        for _ in 0..n {
            let (_, ev) = next(&mut written).await;
            let ev: Event = serde_json::from_value(ev).unwrap();
            let name = ev.metadata.name.unwrap();
            let nanos = i64::from_str_radix(name.rsplit('.').next().unwrap(), 16).unwrap();
            let stamped = k8s_openapi::chrono::DateTime::from_timestamp_nanos(nanos);
            assert!(
                stamped >= before && stamped <= recorded,
                "{name}: stamped {stamped}, recorded between {before} and {recorded}"
            );
            assert_eq!(ev.first_timestamp, ev.last_timestamp);
            let first = ev.first_timestamp.unwrap().0;
            assert!(first.timestamp() <= recorded.timestamp(), "{first}");
        }
        stop.cancel();
    }
}
