//! rkube-client: how rkube's components (and tests, and tools) talk to an apiserver —
//! kubeconfig, a typed client, the Reflector/Informer list-watch machinery, a rate-limited work
//! queue, Lease-based leader election and an aggregating event recorder.

pub mod client;
pub mod config;
pub mod dynamic;
pub mod error;
pub mod events;
pub mod informer;
pub mod leader;
pub mod ratelimit;
pub mod reflector;
#[cfg(test)]
mod testserver;
pub mod wait;
pub mod watch;
pub mod workqueue;

pub use client::{Api, Client, DeleteParams, ListParams, ObjectList, Patch, Resource};
pub use config::{ClientFlags, Config, COMPONENT_MAX_IN_FLIGHT};
pub use error::Error;
pub use informer::{Change, Informer, Store};
pub use k8s_openapi as k8s;
pub use reflector::{Reflector, Stats};
pub use reqwest::Method;
pub use watch::WatchEvent;
pub use workqueue::WorkQueue;

/// The current time as the API's timestamps carry it.
pub fn now() -> k8s_openapi::chrono::DateTime<k8s_openapi::chrono::Utc> {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    k8s_openapi::chrono::DateTime::from_timestamp(d.as_secs() as i64, d.subsec_nanos())
        .unwrap_or_default()
}
