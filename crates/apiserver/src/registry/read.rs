//! The read half of the registry: GET, LIST (resourceVersion / resourceVersionMatch /
//! limit / continue, from the watch cache where upstream allows, else from storage) and WATCH
//! (always from the cache; a consistent start the cache cannot confirm takes its initial
//! state from storage).

use std::time::{Duration, Instant};

use bytes::Bytes;
use rkube_api::{ApiError, ListOptions};

use super::{ListResult, Registry};
use crate::cache::object::{CachedObject, EventType, Filter, Line};
use crate::cache::{Cacher, Start, WatchSpec, WatchStream};
use crate::storage::storage_error;

/// How long reads wait for the cache to reach a requested resourceVersion.
const FRESHNESS_TIMEOUT: Duration = Duration::from_secs(3);

impl Registry {
    /// GET: RV unset reads storage; RV set reads the cache once it is at least that fresh.
    pub async fn get(&self, ns: &str, name: &str, rv: Option<&str>) -> Result<Bytes, ApiError> {
        let key = self.key(ns, name);
        let rv_n = rv
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse::<i64>()
                    .ok()
                    .filter(|n| *n >= 0)
                    .map(|n| n as u64)
                    .ok_or(())
                    .map_err(|_| ApiError::bad_request(format!("invalid resource version: {s}")))
            })
            .transpose()?;
        if let (Some(n), Some(cache)) = (rv_n, &self.cache) {
            if cache.is_ready() {
                if n > 0 {
                    cache.wait_fresh(n, FRESHNESS_TIMEOUT).await?;
                }
                let (obj, _) = cache.get(&key)?;
                return obj
                    .map(|o| o.json())
                    .ok_or_else(|| ApiError::not_found(&self.gr(), name));
            }
        }
        let (stored, _) = self.storage.get(&key).await.map_err(self.serr("get"))?;
        let s = stored.ok_or_else(|| ApiError::not_found(&self.gr(), name))?;
        let v = self.decode(&s)?;
        Ok(Bytes::from(serde_json::to_vec(&v).unwrap_or_default()))
    }

    fn filter(&self, ns: Option<&str>, opts: &ListOptions) -> Result<Filter, ApiError> {
        let mut fields = opts.field_selector.clone();
        fields
            .check_fields(
                self.strategy.selectable_fields(),
                self.strategy.field_aliases(),
            )
            .map_err(ApiError::bad_request)?;
        Ok(Filter {
            namespace: ns
                .filter(|n| !n.is_empty() && self.def.namespaced)
                .map(String::from),
            name: None,
            labels: opts.label_selector.clone(),
            fields,
        })
    }

    /// LIST with upstream's resourceVersion / resourceVersionMatch / limit / continue rules.
    pub async fn list(&self, ns: Option<&str>, opts: &ListOptions) -> Result<ListResult, ApiError> {
        let filter = self.filter(ns, opts)?;
        let limit = opts.limit.max(0) as usize;
        let rv = opts.resource_version.as_deref().unwrap_or("");
        let exact = opts.resource_version_match.as_deref() == Some("Exact")
            || (opts.resource_version_match.is_none() && limit > 0 && !rv.is_empty() && rv != "0");
        if let Some(token) = &opts.continue_token {
            let c = rkube_api::continue_token::decode(token)
                .map_err(|e| ApiError::bad_request(format!("invalid continue token: {e}")))?;
            let start = format!("{}{}", self.scope_prefix(&filter), c.start_key);
            let at = if c.resource_version < 0 {
                0
            } else {
                c.resource_version
            };
            return self.list_storage(&filter, &start, at, limit, true).await;
        }
        let cache = self.cache.as_ref().filter(|c| c.is_ready());
        if exact {
            let n: i64 = rv.parse().unwrap_or(0);
            return self
                .list_storage(&filter, &self.scope_prefix(&filter), n, limit, false)
                .await;
        }
        let Some(cache) = cache else {
            return self
                .list_storage(&filter, &self.scope_prefix(&filter), 0, limit, false)
                .await;
        };
        match rv {
            "" => {
                // Consistent read: from the cache once it has reached storage's revision.
                match cache.consistent_rv().await? {
                    Some(_) => self.list_cache(cache, &filter, limit),
                    None => {
                        self.list_storage(&filter, &self.scope_prefix(&filter), 0, limit, false)
                            .await
                    }
                }
            }
            // "Any": the cache as it is, limit ignored like upstream.
            "0" => self.list_cache(cache, &filter, 0),
            n => {
                let n: u64 = n
                    .parse()
                    .map_err(|_| ApiError::bad_request(format!("invalid resource version: {n}")))?;
                cache.wait_fresh(n, FRESHNESS_TIMEOUT).await?;
                self.list_cache(cache, &filter, limit)
            }
        }
    }

    fn scope_prefix(&self, filter: &Filter) -> String {
        match &filter.namespace {
            Some(ns) => format!("{}{ns}/", self.def.key_prefix(&self.etcd_prefix)),
            None => self.def.key_prefix(&self.etcd_prefix),
        }
    }

    fn list_cache(
        &self,
        cache: &Cacher,
        filter: &Filter,
        limit: usize,
    ) -> Result<ListResult, ApiError> {
        let crate::cache::CacheList {
            items: objs,
            rv,
            more,
            remaining,
        } = cache.list(filter, None, limit)?;
        let continue_token = more.then(|| {
            let last = objs.last().map(|o| o.key.as_str()).unwrap_or("");
            let rel = last
                .strip_prefix(&self.def.key_prefix(&self.etcd_prefix))
                .unwrap_or(last);
            let rel = rel
                .strip_prefix(
                    &filter
                        .namespace
                        .as_ref()
                        .map(|n| format!("{n}/"))
                        .unwrap_or_default(),
                )
                .unwrap_or(rel);
            rkube_api::continue_token::encode(rel, rv as i64)
        });
        let remaining = (more && filter.labels.is_empty() && filter.fields.is_empty())
            .then_some(remaining as i64);
        Ok(ListResult {
            items: objs.iter().map(|o| o.json()).collect(),
            rv,
            continue_token,
            remaining,
        })
    }

    /// A (paged) list straight from storage at revision `at` (0 = current).
    async fn list_storage(
        &self,
        filter: &Filter,
        start: &str,
        at: i64,
        limit: usize,
        continuing: bool,
    ) -> Result<ListResult, ApiError> {
        let prefix = self.scope_prefix(filter);
        let unfiltered = filter.labels.is_empty() && filter.fields.is_empty();
        let mut items = Vec::new();
        let mut start = start.to_string();
        let mut read_rev = at;
        // Unfiltered pages are exactly `limit`; filtered ones read ahead, as upstream does.
        let page_size = if limit == 0 {
            0
        } else if unfiltered {
            limit as i64
        } else {
            (limit as i64).max(100)
        };
        let mut last_key: Option<String> = None;
        let mut remaining: Option<i64> = None;
        let mut more_left = false;
        loop {
            let page = match self
                .storage
                .list(&prefix, &start, read_rev, page_size)
                .await
            {
                Ok(p) => p,
                Err(e) if e.is_compacted() && continuing => {
                    let rel = start
                        .strip_prefix(&prefix)
                        .unwrap_or(&start)
                        .trim_end_matches('\0')
                        .to_string();
                    let fresh =
                        (!rel.is_empty()).then(|| rkube_api::continue_token::encode(&rel, -1));
                    return Err(ApiError::expired_continue(fresh));
                }
                Err(e) if e.is_compacted() => {
                    return Err(ApiError::gone(format!("too old resource version: {at}")))
                }
                Err(e) => return Err(storage_error(self.def, "list", e)),
            };
            read_rev = page.rev;
            let fetched = page.items.len() as i64;
            if unfiltered && page.more {
                remaining = Some(page.count - fetched);
            }
            let n = page.items.len();
            for (i, s) in page.items.into_iter().enumerate() {
                let key = String::from_utf8_lossy(&s.key).into_owned();
                if limit > 0 && items.len() >= limit {
                    more_left = true;
                    break;
                }
                match CachedObject::decode(
                    &*self.strategy,
                    key.clone(),
                    &s.value,
                    s.mod_revision as u64,
                ) {
                    Ok(o) => {
                        if filter.matches(&o) {
                            items.push(o.json());
                        }
                    }
                    // A conversion webhook down: a 500, never a list missing objects.
                    Err(e) if e.starts_with(crate::cache::object::CONVERSION_FAILED) => {
                        return Err(ApiError::internal(e));
                    }
                    Err(_) => {}
                }
                last_key = Some(key);
                if i + 1 == n && page.more {
                    more_left = true;
                }
            }
            if limit > 0 && items.len() >= limit || !page.more {
                break;
            }
            if let Some(k) = &last_key {
                start = format!("{k}\0");
            }
            more_left = false;
        }
        let continue_token = (more_left && limit > 0).then(|| {
            let k = last_key.clone().unwrap_or_default();
            let rel = k.strip_prefix(&prefix).unwrap_or(&k).to_string();
            rkube_api::continue_token::encode(&rel, read_rev)
        });
        Ok(ListResult {
            items,
            rv: read_rev as u64,
            remaining: remaining.filter(|_| continue_token.is_some()),
            continue_token,
        })
    }

    /// WATCH: always from the cache (upstream's rule); RV unset is a consistent start.
    pub async fn watch(
        &self,
        ns: Option<&str>,
        name: Option<&str>,
        opts: &ListOptions,
        deadline: Instant,
    ) -> Result<WatchStream, ApiError> {
        let cache = self
            .cache
            .as_ref()
            .ok_or_else(|| ApiError::internal("no watch cache"))?;
        let mut filter = self.filter(ns, opts)?;
        if let Some(n) = name {
            if let Some(sel) = filter.fields.exact("metadata.name") {
                if sel != n {
                    return Err(ApiError::bad_request(
                        "fieldSelector metadata.name doesn't match requested name",
                    ));
                }
            }
            filter.name = Some(n.to_string());
        }
        let rv = opts.resource_version.as_deref().unwrap_or("");
        let streaming = opts.send_initial_events == Some(true);
        let bookmarks = opts.allow_watch_bookmarks;
        // `sendInitialEvents=false` with RV unset or 0: no synthetic ADDED events, just the
        // changes after the (consistent, or cache's) current revision (KEP-2340's table).
        let no_initial = opts.send_initial_events == Some(false);
        let start = match (rv, streaming) {
            ("", _) => match cache.consistent_rv().await? {
                Some(cur) if no_initial => Start::After(cur),
                Some(_) => Start::Snapshot,
                None if no_initial => Start::After(
                    self.storage
                        .current_revision(&cache.prefix)
                        .await
                        .map_err(self.serr("watch"))? as u64,
                ),
                None => {
                    return self
                        .watch_from_storage_snapshot(cache, filter, streaming, bookmarks, deadline)
                        .await
                }
            },
            ("0", _) if no_initial => Start::After(cache.resource_version()),
            ("0", _) => Start::Snapshot,
            (n, true) => {
                let n: u64 = n
                    .parse()
                    .map_err(|_| ApiError::bad_request(format!("invalid resource version: {n}")))?;
                cache.wait_fresh(n, FRESHNESS_TIMEOUT).await?;
                Start::Snapshot
            }
            (n, false) => {
                let n: u64 = n
                    .parse()
                    .map_err(|_| ApiError::bad_request(format!("invalid resource version: {n}")))?;
                cache.wait_history(n, FRESHNESS_TIMEOUT).await;
                Start::After(n)
            }
        };
        cache.watch(WatchSpec {
            filter,
            start,
            bookmarks,
            initial_events_end: streaming && bookmarks,
            deadline,
        })
    }

    /// A consistent watch start the cache cannot confirm (storage without progress requests):
    /// the initial state comes from storage at its current revision, the changes after it
    /// from the cache.
    async fn watch_from_storage_snapshot(
        &self,
        cache: &Cacher,
        filter: Filter,
        streaming: bool,
        bookmarks: bool,
        deadline: Instant,
    ) -> Result<WatchStream, ApiError> {
        let snap = self
            .list_storage(&filter, &self.scope_prefix(&filter), 0, 0, false)
            .await?;
        let mut initial: Vec<Line> = snap
            .items
            .into_iter()
            .map(|j| Line::event(EventType::Added, j))
            .collect();
        if streaming && bookmarks {
            initial.push(crate::cache::object::bookmark_line(self.def, snap.rv, true));
        }
        let mut ws = cache.watch(WatchSpec {
            filter,
            start: Start::After(snap.rv),
            bookmarks,
            initial_events_end: false,
            deadline,
        })?;
        initial.append(&mut ws.initial);
        ws.initial = initial;
        Ok(ws)
    }
}
