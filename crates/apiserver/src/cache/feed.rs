//! How a Cacher follows storage: a paged list at one revision, then one watch with prev_kv and
//! progress notifications.
//!
//! States: *listing* (cache not ready) → *replaying* (the watch starts at the oldest revision
//! storage retains; events up to the list revision only fill the history, so watches from
//! before this apiserver started can resume) → *live* (events update the state and go to
//! watchers). A broken stream is re-watched from the last revision without re-listing; only a
//! compacted watch start forces a re-list.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rkube_daemon::ShutdownToken;
use rkube_etcd_api::*;

use super::object::{CachedEvent, CachedObject, EventType as Ev};
use super::Cacher;

const PAGE: i64 = 10_000;

enum End {
    Shutdown,
    /// Storage compacted past our revision: re-list.
    Relist,
}

pub async fn run(c: Arc<Cacher>, shutdown: ShutdownToken) {
    let mut backoff = Duration::from_millis(100);
    // The first watch after start replays retained history; later ones only go forward.
    let mut replay_history = true;
    loop {
        if shutdown.is_cancelled() {
            return;
        }
        let list_rv = match list_all(&c).await {
            Ok((objects, rv)) => {
                c.replace(objects, rv);
                backoff = Duration::from_millis(100);
                rv
            }
            Err(e) => {
                tracing::warn!(resource = c.def.plural, error = %e, "watch cache list failed, retrying");
                c.set_not_ready();
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        if replay_history {
            c.begin_replay();
        }
        match watch(&c, list_rv, replay_history, &shutdown).await {
            End::Shutdown => return,
            End::Relist => {
                tracing::info!(
                    resource = c.def.plural,
                    "watch cache re-listing after compaction"
                );
                replay_history = false;
            }
        }
    }
}

async fn list_all(c: &Cacher) -> Result<(BTreeMap<String, Arc<CachedObject>>, u64), EtcdError> {
    let mut objects = BTreeMap::new();
    let mut start = c.prefix.clone();
    let mut rev = 0;
    loop {
        let page = c.storage.list(&c.prefix, &start, rev, PAGE).await?;
        let (items, more) = (page.items, page.more);
        rev = page.rev;
        for s in &items {
            let key = String::from_utf8_lossy(&s.key).into_owned();
            match CachedObject::decode(&*c.strategy, key.clone(), &s.value, s.mod_revision as u64) {
                Ok(o) => {
                    objects.insert(key, Arc::new(o));
                }
                Err(e) if conversion_failed(&e) => return Err(EtcdError::Decode(e)),
                Err(e) => {
                    tracing::warn!(resource = c.def.plural, error = %e, "skipping undecodable object")
                }
            }
        }
        match (more, items.last()) {
            (true, Some(last)) => {
                let mut next = last.key.clone();
                next.push(0);
                start = String::from_utf8_lossy(&next).into_owned();
            }
            _ => break,
        }
    }
    Ok((objects, rev as u64))
}

async fn watch(
    c: &Arc<Cacher>,
    list_rv: u64,
    replay_history: bool,
    shutdown: &ShutdownToken,
) -> End {
    let mut start: i64 = if replay_history {
        1
    } else {
        list_rv as i64 + 1
    };
    let mut replaying = replay_history;
    let mut last_rv = list_rv;
    // Where the replayed history starts (for `finish_replay`), and the newest replayed event,
    // so a stream that breaks mid-replay resumes after it instead of replaying twice.
    let mut history_start = start;
    let mut replayed: Option<u64> = None;
    let mut backoff = Duration::from_millis(100);
    loop {
        let create = WatchCreateRequest {
            key: c.prefix.as_bytes().to_vec(),
            range_end: prefix_range_end(c.prefix.as_bytes()),
            start_revision: start,
            prev_kv: true,
            progress_notify: true,
            ..Default::default()
        };
        let opened = if c.duplex {
            c.storage
                .client
                .watch_duplex(vec![WatchRequest::create(create)])
                .await
                .map(|(tx, rx)| (Some(tx), rx))
        } else {
            c.storage
                .client
                .watch(vec![WatchRequest::create(create)])
                .await
                .map(|rx| (None, rx))
        };
        let mut rx = match opened {
            Ok((tx, rx)) => {
                *c.progress.lock().unwrap() = tx;
                rx
            }
            Err(e) => {
                tracing::warn!(resource = c.def.plural, error = %e, "watch cache watch failed, retrying");
                tokio::select! {
                    _ = shutdown.cancelled() => return End::Shutdown,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        loop {
            let next = tokio::select! {
                _ = shutdown.cancelled() => return End::Shutdown,
                n = rx.next() => n,
            };
            let resp = match next {
                Some(Ok(r)) => r,
                Some(Err(e)) => {
                    tracing::warn!(resource = c.def.plural, error = %e, "watch cache stream broke, re-watching");
                    break;
                }
                None => break,
            };
            if resp.created {
                if replaying && c.duplex {
                    // Answered once the replay is complete: marks the history as whole.
                    c.request_progress().await;
                }
                continue;
            }
            if resp.canceled {
                if resp.compact_revision > 0 && replaying {
                    // History starts later than asked: replay from what storage still has.
                    start = resp.compact_revision;
                    history_start = start;
                    replayed = None;
                    break;
                }
                if resp.compact_revision > 0 {
                    return End::Relist;
                }
                break;
            }
            if resp.events.is_empty() {
                let rev = resp.header.as_ref().map(|h| h.revision).unwrap_or(0) as u64;
                if replaying && rev >= list_rv {
                    finish_replay(c, history_start);
                    replaying = false;
                }
                if !replaying {
                    // Everything up to `rev` has been delivered: a re-watch may start after it.
                    last_rv = last_rv.max(rev);
                    c.progress(rev);
                }
                continue;
            }
            for e in resp.events {
                let ev = match convert(c, e) {
                    Ok(Some(ev)) => ev,
                    Ok(None) => continue,
                    Err(why) => {
                        // A conversion webhook failed: serve nothing stale or partial; the
                        // re-list fails (not ready) until conversions work again.
                        tracing::warn!(resource = c.def.plural, error = %why, "watch cache conversion failed, re-listing");
                        c.set_not_ready();
                        return End::Relist;
                    }
                };
                if ev.rv <= list_rv {
                    if replaying {
                        replayed = Some(replayed.unwrap_or(0).max(ev.rv));
                        c.prefill(ev);
                    }
                } else {
                    if replaying {
                        finish_replay(c, history_start);
                        replaying = false;
                    }
                    last_rv = last_rv.max(ev.rv);
                    c.apply(ev);
                }
            }
            backoff = Duration::from_millis(100);
        }
        *c.progress.lock().unwrap() = None;
        if !replaying {
            start = last_rv as i64 + 1;
        } else if let Some(r) = replayed {
            start = r as i64 + 1;
        }
        tokio::select! {
            _ = shutdown.cancelled() => return End::Shutdown,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// The replayed history is complete from `start` on (a compacted start's own revision may
/// have lost deletions, so it counts from the next one).
fn finish_replay(c: &Cacher, start: i64) {
    let oldest = if start <= 1 { 1 } else { start as u64 + 1 };
    c.set_oldest(oldest);
}

/// Whether a decode failed for a conversion between versions (a webhook's), not the bytes.
fn conversion_failed(e: &str) -> bool {
    e.starts_with(crate::cache::object::CONVERSION_FAILED)
}

/// A storage event as the cache keeps it; `Err` when converting it between versions failed.
fn convert(c: &Cacher, e: Event) -> Result<Option<CachedEvent>, String> {
    let Some(kv) = e.kv else { return Ok(None) };
    let key = String::from_utf8_lossy(&kv.key).into_owned();
    let rv = kv.mod_revision as u64;
    // The previous state is usually the cached one: decoded already.
    let cached = |p: &KeyValue| {
        c.get(&key)
            .ok()
            .and_then(|(o, _)| o)
            .filter(|o| o.rv == p.mod_revision as u64)
    };
    let prev = match e.prev_kv {
        None => None,
        Some(p) => match cached(&p) {
            Some(o) => Some(o),
            None => decode_prev(c, &key, p)?,
        },
    };
    match e.kind {
        EventType::Delete => {
            let Some(last) = prev.or_else(|| c.get(&key).ok().and_then(|(o, _)| o)) else {
                return Ok(None);
            };
            Ok(Some(CachedEvent::new(
                Ev::Deleted,
                rv,
                Arc::new(last.with_rv(rv)),
                None,
            )))
        }
        EventType::Put => {
            let value = match c.storage.decrypt(&kv.key, kv.value) {
                Ok(v) => v,
                Err(err) => {
                    tracing::warn!(resource = c.def.plural, error = %err, "skipping undecryptable object");
                    return Ok(None);
                }
            };
            let obj = match CachedObject::decode(&*c.strategy, key, &value, rv) {
                Ok(o) => Arc::new(o),
                Err(err) if conversion_failed(&err) => return Err(err),
                Err(err) => {
                    tracing::warn!(resource = c.def.plural, error = %err, "skipping undecodable object");
                    return Ok(None);
                }
            };
            let created = kv.create_revision == kv.mod_revision || prev.is_none();
            Ok(Some(CachedEvent::new(
                if created { Ev::Added } else { Ev::Modified },
                rv,
                obj,
                if created { None } else { prev },
            )))
        }
    }
}

/// The previous state from storage's `prev_kv`, when the cache does not hold it.
fn decode_prev(c: &Cacher, key: &str, p: KeyValue) -> Result<Option<Arc<CachedObject>>, String> {
    Ok(match c.storage.decrypt(&p.key, p.value) {
        Err(err) => {
            tracing::warn!(resource = c.def.plural, error = %err, "undecryptable previous object");
            None
        }
        Ok(value) => {
            match CachedObject::decode(&*c.strategy, key.to_string(), &value, p.mod_revision as u64)
            {
                Ok(o) => Some(Arc::new(o)),
                Err(err) if conversion_failed(&err) => return Err(err),
                Err(err) => {
                    tracing::warn!(resource = c.def.plural, error = %err, "undecodable previous object");
                    None
                }
            }
        }
    })
}
