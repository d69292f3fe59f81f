//! The apiserver's Prometheus metrics: requests and latency by verb, resource and code; open
//! watches; cache sizes and storage revision are computed when scraped.

use std::sync::Arc;
use std::time::Duration;

use rkube_daemon::metrics::{Gauge, Registry, LATENCY_BUCKETS};

pub struct ApiMetrics {
    pub registry: Arc<Registry>,
    pub watches: Gauge,
}

impl ApiMetrics {
    pub fn new(registry: Arc<Registry>) -> Self {
        let watches = registry.gauge(
            "apiserver_longrunning_requests",
            "Open watch requests.",
            &[("verb", "WATCH")],
        );
        ApiMetrics { registry, watches }
    }

    pub fn observe(&self, verb: &str, resource: &str, code: u16, took: Duration) {
        let code = code.to_string();
        self.registry
            .counter(
                "apiserver_request_total",
                "Requests by verb, resource and HTTP code.",
                &[("verb", verb), ("resource", resource), ("code", &code)],
            )
            .inc();
        self.registry
            .histogram(
                "apiserver_request_duration_seconds",
                "Request latency by verb and resource.",
                &[("verb", verb), ("resource", resource)],
                LATENCY_BUCKETS,
            )
            .observe_duration(took);
    }
}
