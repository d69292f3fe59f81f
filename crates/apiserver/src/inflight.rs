//! The max-in-flight limits (`--max-requests-inflight` 400, `--max-mutating-requests-inflight`
//! 200; 0 turns one off): a request over its class's limit is refused at once with 429 and
//! `Retry-After: 1`, as upstream's legacy filter does. Long-running requests (watches, followed
//! logs) are not counted.

use std::sync::Arc;

use rkube_api::authz::Attributes;
use rkube_api::ApiError;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub struct Limits {
    read: Option<Arc<Semaphore>>,
    mutating: Option<Arc<Semaphore>>,
}

/// Whether a request streams for a long time and so stays out of the counts.
pub fn long_running(a: &Attributes, query: &str) -> bool {
    a.verb == "watch"
        || (a.subresource == "log"
            && query
                .split('&')
                .any(|kv| kv == "follow=true" || kv == "follow=1"))
}

fn mutating(verb: &str) -> bool {
    matches!(
        verb,
        "create" | "update" | "patch" | "delete" | "deletecollection"
    )
}

impl Limits {
    pub fn new(max_read: usize, max_mutating: usize) -> Self {
        let sem = |n: usize| (n > 0).then(|| Arc::new(Semaphore::new(n)));
        Limits {
            read: sem(max_read),
            mutating: sem(max_mutating),
        }
    }

    /// A seat for the request (held until its response is built), or 429.
    pub fn admit(
        &self,
        a: &Attributes,
        query: &str,
    ) -> Result<Option<OwnedSemaphorePermit>, ApiError> {
        if long_running(a, query) {
            return Ok(None);
        }
        let pool = if mutating(&a.verb) {
            &self.mutating
        } else {
            &self.read
        };
        let Some(pool) = pool else { return Ok(None) };
        pool.clone().try_acquire_owned().map(Some).map_err(|_| {
            ApiError::too_many_requests("Too many requests, please try again later.", 1)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(verb: &str) -> Attributes {
        Attributes {
            verb: verb.into(),
            resource_request: true,
            resource: "pods".into(),
            ..Default::default()
        }
    }

    #[test]
    fn each_class_is_limited_apart_and_watches_are_free() {
        let limits = Limits::new(1, 1);
        let read = limits.admit(&attrs("list"), "").unwrap();
        assert!(read.is_some());
        let err = limits.admit(&attrs("get"), "").unwrap_err();
        assert_eq!((err.code(), err.reason()), (429, "TooManyRequests"));
        assert_eq!(
            err.status().details.as_ref().unwrap().retry_after_seconds,
            1
        );
        // Writes have their own seats; watches take none.
        let write = limits.admit(&attrs("create"), "").unwrap();
        assert!(write.is_some());
        assert!(limits.admit(&attrs("patch"), "").is_err());
        assert!(limits.admit(&attrs("watch"), "").unwrap().is_none());
        let mut logs = attrs("get");
        logs.subresource = "log".into();
        assert!(limits.admit(&logs, "follow=true").unwrap().is_none());
        drop(read);
        assert!(limits.admit(&attrs("get"), "").unwrap().is_some());
        // 0 = off.
        let off = Limits::new(0, 0);
        assert!(off.admit(&attrs("list"), "").unwrap().is_none());
    }
}
