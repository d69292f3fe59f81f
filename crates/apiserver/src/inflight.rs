//! The max-in-flight limits (`--max-requests-inflight` 400, `--max-mutating-requests-inflight`
//! 200; 0 turns one off): a request over its class's limit is refused at once with 429 and
//! `Retry-After: 1`, as upstream's legacy filter does. Long-running requests (watches, logs) are
//! not counted: the chain does not ask for their seats.

use std::sync::Arc;

use rkube_api::ApiError;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub struct Limits {
    read: Option<Arc<Semaphore>>,
    mutating: Option<Arc<Semaphore>>,
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

    /// A seat for a request that is not long-running (held until its response is written),
    /// or 429.
    pub fn admit(&self, verb: &str) -> Result<Option<OwnedSemaphorePermit>, ApiError> {
        let pool = if mutating(verb) {
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

/// Open long-running requests per user — watches and log streams (`--max-watches-per-user`,
/// 0 = no limit): a user past the limit gets 429 until one of them ends. They hold no seat, so
/// without this one client could hold unbounded server memory and outbound connections open.
pub struct Watches {
    per_user: usize,
    open: Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>>,
}

/// One open watch of a user; dropped when its stream ends.
pub struct WatchGuard {
    user: String,
    open: Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>>,
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.get_mut(&self.user) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.user);
            }
        }
    }
}

impl Watches {
    pub fn new(per_user: usize) -> Self {
        Watches {
            per_user,
            open: Default::default(),
        }
    }

    /// A slot for one more watch of `user`, or 429.
    pub fn admit(&self, user: &str) -> Result<WatchGuard, ApiError> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.entry(user.to_string()).or_insert(0);
        if self.per_user > 0 && *n >= self.per_user {
            return Err(ApiError::too_many_requests(
                format!(
                    "Too many requests: user {user:?} has {} open watches, the limit is {}",
                    n, self.per_user
                ),
                1,
            ));
        }
        *n += 1;
        Ok(WatchGuard {
            user: user.to_string(),
            open: self.open.clone(),
        })
    }

    /// Open watches of `user`.
    pub fn open(&self, user: &str) -> usize {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.get(user).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_class_is_limited_apart() {
        let limits = Limits::new(1, 1);
        let read = limits.admit("list").unwrap();
        assert!(read.is_some());
        let err = limits.admit("get").unwrap_err();
        assert_eq!((err.code(), err.reason()), (429, "TooManyRequests"));
        assert_eq!(
            err.status().details.as_ref().unwrap().retry_after_seconds,
            1
        );
        // Writes have their own seats.
        let write = limits.admit("create").unwrap();
        assert!(write.is_some());
        assert!(limits.admit("patch").is_err());
        drop(read);
        assert!(limits.admit("get").unwrap().is_some());
        // 0 = off.
        let off = Limits::new(0, 0);
        assert!(off.admit("list").unwrap().is_none());
    }

    #[test]
    fn watches_are_capped_per_user_and_given_back() {
        let w = Watches::new(2);
        let a = w.admit("alice").unwrap();
        let b = w.admit("alice").unwrap();
        let e = w.admit("alice").err().expect("over the limit");
        assert_eq!(e.code(), 429);
        // Another user is not affected.
        let _c = w.admit("bob").unwrap();
        drop(a);
        assert_eq!(w.open("alice"), 1);
        let _d = w.admit("alice").unwrap();
        drop(b);
        assert_eq!(w.open("alice"), 1);
    }
}
