//! A small Prometheus text-format registry: labelled counters, gauges and histograms.
//! Enough for rkube's `/metrics` endpoints without pulling in a metrics framework.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

type Labels = Vec<(String, String)>;

/// Default latency buckets in seconds (100 µs … 10 s).
pub const LATENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

#[derive(Default)]
pub struct Registry {
    families: Mutex<BTreeMap<String, Family>>,
}

struct Family {
    help: String,
    kind: Kind,
    series: BTreeMap<Labels, Series>,
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

#[derive(Clone)]
enum Series {
    Counter(Counter),
    Gauge(Gauge),
    Histogram(Histogram),
    GaugeFn(Arc<dyn Fn() -> f64 + Send + Sync>),
}

/// A monotonically increasing count.
#[derive(Clone, Default)]
pub struct Counter(Arc<AtomicU64>);

impl Counter {
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A value that goes up and down.
#[derive(Clone, Default)]
pub struct Gauge(Arc<AtomicI64>);

impl Gauge {
    pub fn set(&self, v: i64) {
        self.0.store(v, Ordering::Relaxed);
    }
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    pub fn dec(&self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A cumulative histogram over fixed bucket bounds.
#[derive(Clone)]
pub struct Histogram(Arc<HistogramInner>);

struct HistogramInner {
    bounds: Vec<f64>,
    buckets: Vec<AtomicU64>,
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Histogram {
    fn new(bounds: &[f64]) -> Self {
        Histogram(Arc::new(HistogramInner {
            bounds: bounds.to_vec(),
            buckets: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_micros: AtomicU64::new(0),
        }))
    }
    pub fn observe(&self, v: f64) {
        let h = &self.0;
        if let Some(i) = h.bounds.iter().position(|b| v <= *b) {
            h.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        h.count.fetch_add(1, Ordering::Relaxed);
        h.sum_micros
            .fetch_add((v * 1e6).max(0.0) as u64, Ordering::Relaxed);
    }
    pub fn observe_duration(&self, d: Duration) {
        self.observe(d.as_secs_f64());
    }
    pub fn count(&self) -> u64 {
        self.0.count.load(Ordering::Relaxed)
    }
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl Registry {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn series(
        &self,
        name: &str,
        help: &str,
        kind: Kind,
        l: Labels,
        make: impl FnOnce() -> Series,
    ) -> Series {
        let mut fams = self.families.lock().unwrap();
        let fam = fams.entry(name.to_string()).or_insert_with(|| Family {
            help: help.to_string(),
            kind,
            series: BTreeMap::new(),
        });
        fam.series.entry(l).or_insert_with(make).clone()
    }

    pub fn counter(&self, name: &str, help: &str, l: &[(&str, &str)]) -> Counter {
        match self.series(name, help, Kind::Counter, labels(l), || {
            Series::Counter(Counter::default())
        }) {
            Series::Counter(c) => c,
            _ => Counter::default(),
        }
    }

    pub fn gauge(&self, name: &str, help: &str, l: &[(&str, &str)]) -> Gauge {
        match self.series(name, help, Kind::Gauge, labels(l), || {
            Series::Gauge(Gauge::default())
        }) {
            Series::Gauge(g) => g,
            _ => Gauge::default(),
        }
    }

    /// A gauge whose value is computed when scraped.
    pub fn gauge_fn(
        &self,
        name: &str,
        help: &str,
        l: &[(&str, &str)],
        f: impl Fn() -> f64 + Send + Sync + 'static,
    ) {
        let mut fams = self.families.lock().unwrap();
        let fam = fams.entry(name.to_string()).or_insert_with(|| Family {
            help: help.to_string(),
            kind: Kind::Gauge,
            series: BTreeMap::new(),
        });
        fam.series.insert(labels(l), Series::GaugeFn(Arc::new(f)));
    }

    pub fn histogram(
        &self,
        name: &str,
        help: &str,
        l: &[(&str, &str)],
        bounds: &[f64],
    ) -> Histogram {
        match self.series(name, help, Kind::Histogram, labels(l), || {
            Series::Histogram(Histogram::new(bounds))
        }) {
            Series::Histogram(h) => h,
            _ => Histogram::new(bounds),
        }
    }

    /// Renders every family in the Prometheus text exposition format.
    pub fn render(&self) -> String {
        let fams = self.families.lock().unwrap();
        let mut out = String::new();
        for (name, fam) in fams.iter() {
            let kind = match fam.kind {
                Kind::Counter => "counter",
                Kind::Gauge => "gauge",
                Kind::Histogram => "histogram",
            };
            let _ = writeln!(out, "# HELP {name} {}", fam.help);
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for (l, s) in &fam.series {
                match s {
                    Series::Counter(c) => {
                        let _ = writeln!(out, "{name}{} {}", fmt_labels(l, None), c.get());
                    }
                    Series::Gauge(g) => {
                        let _ = writeln!(out, "{name}{} {}", fmt_labels(l, None), g.get());
                    }
                    Series::GaugeFn(f) => {
                        let _ = writeln!(out, "{name}{} {}", fmt_labels(l, None), f());
                    }
                    Series::Histogram(h) => {
                        let mut cum = 0;
                        for (b, n) in h.0.bounds.iter().zip(&h.0.buckets) {
                            cum += n.load(Ordering::Relaxed);
                            let le = format!("{b}");
                            let _ =
                                writeln!(out, "{name}_bucket{} {cum}", fmt_labels(l, Some(&le)));
                        }
                        let count = h.count();
                        let _ =
                            writeln!(out, "{name}_bucket{} {count}", fmt_labels(l, Some("+Inf")));
                        let sum = h.0.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
                        let _ = writeln!(out, "{name}_sum{} {sum}", fmt_labels(l, None));
                        let _ = writeln!(out, "{name}_count{} {count}", fmt_labels(l, None));
                    }
                }
            }
        }
        out
    }
}

fn fmt_labels(l: &Labels, le: Option<&str>) -> String {
    if l.is_empty() && le.is_none() {
        return String::new();
    }
    let mut parts: Vec<String> = l
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\"")))
        .collect();
    if let Some(le) = le {
        parts.push(format!("le=\"{le}\""));
    }
    format!("{{{}}}", parts.join(","))
}

/// Reads this process's resident set size in bytes (Linux), or 0 where unknown.
/// Told of a finished request: verb, code, latency (`rkube_client::RequestObserver`).
pub type RequestObserver = Arc<dyn Fn(&str, &str, std::time::Duration) + Send + Sync>;

/// A client's request observer recording upstream's `rest_client_requests_total{code,method,
/// host}` and `rest_client_request_duration_seconds{verb,host}` in `registry` (`server` is the
/// apiserver URL; its host:port is the `host` label).
pub fn rest_client_observer(registry: Arc<Registry>, server: &str) -> RequestObserver {
    let host = server
        .split_once("://")
        .map_or(server, |(_, rest)| rest)
        .trim_end_matches('/')
        .to_string();
    Arc::new(move |verb: &str, code: &str, took: std::time::Duration| {
        registry
            .counter(
                "rest_client_requests_total",
                "Requests to the apiserver by code, method and host.",
                &[("code", code), ("method", verb), ("host", &host)],
            )
            .inc();
        registry
            .histogram(
                "rest_client_request_duration_seconds",
                "Request latency to the apiserver by verb and host.",
                &[("verb", verb), ("host", &host)],
                LATENCY_BUCKETS,
            )
            .observe_duration(took);
    })
}

pub fn process_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .map(|pages| pages * 4096)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clients_requests_are_counted_by_code_method_and_host() {
        let r = Registry::new();
        let observe = rest_client_observer(r.clone(), "https://127.0.0.1:6443/");
        observe("GET", "200", std::time::Duration::from_millis(3));
        observe("GET", "200", std::time::Duration::from_millis(5));
        observe("POST", "<error>", std::time::Duration::from_millis(1));
        let text = r.render();
        assert!(
            text.contains(
                r#"rest_client_requests_total{code="200",method="GET",host="127.0.0.1:6443"} 2"#
            ),
            "{text}"
        );
        assert!(text.contains(r#"rest_client_requests_total{code="<error>",method="POST",host="127.0.0.1:6443"} 1"#), "{text}");
        assert!(
            text.contains(
                r#"rest_client_request_duration_seconds_count{verb="GET",host="127.0.0.1:6443"} 2"#
            ),
            "{text}"
        );
    }

    #[test]
    fn renders_counters_and_histograms() {
        let r = Registry::new();
        r.counter("reqs_total", "Requests.", &[("method", "put")])
            .add(3);
        let h = r.histogram("lat_seconds", "Latency.", &[], &[0.1, 1.0]);
        h.observe(0.05);
        h.observe(0.5);
        let text = r.render();
        assert!(text.contains("reqs_total{method=\"put\"} 3"), "{text}");
        assert!(text.contains("lat_seconds_bucket{le=\"0.1\"} 1"), "{text}");
        assert!(text.contains("lat_seconds_bucket{le=\"+Inf\"} 2"), "{text}");
        assert!(text.contains("lat_seconds_count 2"), "{text}");
    }
}
