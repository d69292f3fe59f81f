//! rkube-client: how rkube's components (and tests, and tools) talk to an apiserver —
//! kubeconfig, a typed client, the Reflector/Informer list-watch machinery, a rate-limited work
//! queue, Lease-based leader election and an aggregating event recorder.

/// k8s-openapi's `Resource`, `ListableResource` and `Metadata` (with `ObjectMeta`) for a type
/// of ours with a `metadata` field: what lets it be listed and watched like a generated one.
macro_rules! impl_resource {
    ($ty:ty, $group:literal, $version:literal, $kind:literal, $plural:literal, $scope:ident) => {
        impl k8s_openapi::Resource for $ty {
            const API_VERSION: &'static str = if $group.is_empty() {
                $version
            } else {
                concat!($group, "/", $version)
            };
            const GROUP: &'static str = $group;
            const KIND: &'static str = $kind;
            const VERSION: &'static str = $version;
            const URL_PATH_SEGMENT: &'static str = $plural;
            type Scope = k8s_openapi::$scope;
        }

        impl k8s_openapi::ListableResource for $ty {
            const LIST_KIND: &'static str = concat!($kind, "List");
        }

        impl k8s_openapi::Metadata for $ty {
            type Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

            fn metadata(&self) -> &Self::Ty {
                &self.metadata
            }

            fn metadata_mut(&mut self) -> &mut Self::Ty {
                &mut self.metadata
            }
        }
    };
}

pub mod client;
pub mod config;
pub mod dynamic;
pub mod error;
pub mod events;
pub mod informer;
pub mod leader;
pub mod pod;
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
