//! The apiserver's Prometheus metrics, under upstream's names: requests and latency by verb,
//! resource and code; open watches and the events sent on them; priority and fairness
//! levels' seats and queues; cache sizes and storage revision are computed when scraped.

use std::sync::Arc;
use std::time::Duration;

use rkube_daemon::metrics::{Counter, Gauge, Registry, LATENCY_BUCKETS};

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

    /// `apiserver_watch_events_total` of one kind (a watch takes it once, then counts).
    pub fn watch_events(&self, group: &str, version: &str, kind: &str) -> Counter {
        self.registry.counter(
            "apiserver_watch_events_total",
            "Events sent to watch clients, bookmarks included.",
            &[("group", group), ("version", version), ("kind", kind)],
        )
    }

    /// Upstream's `apiserver_flowcontrol_*` gauges for the default priority levels.
    pub fn flowcontrol(&self, apf: &Arc<crate::flowcontrol::Apf>) {
        for level in crate::flowcontrol::DEFAULT_LEVELS {
            let a = apf.clone();
            self.registry.gauge_fn(
                "apiserver_flowcontrol_nominal_limit_seats",
                "Seats a priority level may use at once.",
                &[("priority_level", level)],
                move || a.nominal_seats(level) as f64,
            );
            let a = apf.clone();
            self.registry.gauge_fn(
                "apiserver_flowcontrol_current_executing_seats",
                "Seats in use by a priority level's executing requests.",
                &[("priority_level", level)],
                move || a.executing(level) as f64,
            );
            let a = apf.clone();
            self.registry.gauge_fn(
                "apiserver_flowcontrol_current_inqueue_requests",
                "Requests waiting in a priority level's queues.",
                &[("priority_level", level)],
                move || a.queued(level) as f64,
            );
        }
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
