//! Simulated container logs, served at `GET /containerLogs/{namespace}/{pod}/{container}` as a
//! kubelet serves them to the apiserver's `pods/log`: nginx-style start-up and access lines for
//! nginx images, generic lines otherwise, one line per `LINE_EVERY` of the container's life;
//! `tailLines`, `sinceSeconds`, `timestamps`, `follow` (streams as lines come due) and
//! `previous` (the lines of the instance before the last restart).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use k8s_openapi::chrono::{DateTime, SecondsFormat, Utc};

use crate::worker::SimHandle;

pub const LINE_EVERY: Duration = Duration::from_secs(5);

/// `ns/name` → simulation, across every node of this process.
pub type Sims = Arc<Mutex<HashMap<String, SimHandle>>>;

/// The line written at `at`, the n-th of the container's life.
pub fn line(image: &str, container: &str, n: u64, at: DateTime<Utc>) -> String {
    let nginx = image.starts_with("nginx") || image.contains("/nginx");
    if nginx {
        const START: [&str; 5] = [
            "/docker-entrypoint.sh: /docker-entrypoint.d/ is not empty, will attempt to perform configuration",
            "/docker-entrypoint.sh: Looking for shell scripts in /docker-entrypoint.d/",
            "10-listen-on-ipv6-by-default.sh: info: Enabled listen on IPv6 in /etc/nginx/conf.d/default.conf",
            "/docker-entrypoint.sh: Configuration complete; ready for start up",
            "start worker processes",
        ];
        if let Some(l) = START.get(n as usize) {
            return l.to_string();
        }
        let ts = at.format("%d/%b/%Y:%H:%M:%S +0000");
        return format!(
            "10.244.0.1 - - [{ts}] \"GET / HTTP/1.1\" 200 615 \"-\" \"kube-probe/1.33\" \"-\""
        );
    }
    if n == 0 {
        return format!("{container} started ({image})");
    }
    format!("{container}: simulated work, tick {n}")
}

#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct LogQuery {
    #[serde(default)]
    follow: Option<String>,
    #[serde(default)]
    tail_lines: Option<i64>,
    #[serde(default)]
    since_seconds: Option<i64>,
    #[serde(default)]
    timestamps: Option<String>,
    #[serde(default)]
    previous: Option<String>,
}

fn flag(v: &Option<String>) -> bool {
    v.as_deref()
        .is_some_and(|v| v == "true" || v == "1" || v.is_empty())
}

/// Lines 0..n of a container started at `start`, up to `until`: (time, text).
pub fn lines(
    image: &str,
    container: &str,
    start: DateTime<Utc>,
    until: DateTime<Utc>,
) -> Vec<(DateTime<Utc>, String)> {
    let every = k8s_openapi::chrono::Duration::from_std(LINE_EVERY).expect("small");
    let mut out = Vec::new();
    let mut at = start;
    let mut n = 0u64;
    while at <= until {
        // Start-up lines come all at once.
        out.push((at, line(image, container, n, at)));
        n += 1;
        if n >= 5 || !image.starts_with("nginx") {
            at += every;
        }
    }
    out
}

fn render(ts: bool, at: DateTime<Utc>, text: &str) -> String {
    if ts {
        format!(
            "{} {text}\n",
            at.to_rfc3339_opts(SecondsFormat::Nanos, true)
        )
    } else {
        format!("{text}\n")
    }
}

async fn container_logs(
    State(sims): State<Sims>,
    Path((ns, pod, container)): Path<(String, String, String)>,
    Query(q): Query<LogQuery>,
) -> Response {
    let sim = sims.lock().unwrap().get(&format!("{ns}/{pod}")).cloned();
    let Some(sim) = sim else {
        return (
            StatusCode::NOT_FOUND,
            format!("pod {ns}/{pod} not found on this node\n"),
        )
            .into_response();
    };
    let previous = flag(&q.previous);
    let run = sim.lock().unwrap().log_run(&container, previous, &pod);
    let run = match run {
        Ok(r) => r,
        Err(e) => {
            let code = if e.contains("not valid") {
                StatusCode::NOT_FOUND
            } else {
                StatusCode::BAD_REQUEST
            };
            return (code, format!("{e}\n")).into_response();
        }
    };
    let (image, start) = (run.image, run.start);
    let now = rkube_client::now();
    let until = run.end.unwrap_or(now);
    let mut all = lines(&image, &container, start, until);
    if let Some(s) = q.since_seconds.filter(|s| *s > 0) {
        // Clamped: a huge value means "everything", not an overflow.
        let from = now - k8s_openapi::chrono::Duration::seconds(s.min(10 * 365 * 86400));
        all.retain(|(at, _)| *at >= from);
    }
    if let Some(t) = q.tail_lines.filter(|t| *t >= 0) {
        let skip = all.len().saturating_sub(t as usize);
        all.drain(..skip);
    }
    let ts = flag(&q.timestamps);
    let head: String = all.iter().map(|(at, l)| render(ts, *at, l)).collect();
    if !flag(&q.follow) || run.end.is_some() {
        return (StatusCode::OK, [("content-type", "text/plain")], head).into_response();
    }
    // Follow: the lines so far, then each new one as it comes due, while the pod lives.
    let n = lines(&image, &container, start, now).len() as u64;
    // A weak handle: the stream ends when the pod's worker (and the registry) let go of it.
    let sim = Arc::downgrade(&sim);
    let stream = futures_util::stream::unfold((Some(head), n, sim), move |(first, n, sim)| {
        let image = image.clone();
        let container = container.clone();
        async move {
            if let Some(h) = first {
                return Some((
                    Ok::<_, std::io::Error>(bytes::Bytes::from(h)),
                    (None, n, sim),
                ));
            }
            tokio::time::sleep(LINE_EVERY).await;
            let Some(sim) = sim.upgrade() else {
                return None; // the pod's worker ended
            };
            if sim
                .lock()
                .unwrap()
                .log_run(&container, false, "")
                .is_ok_and(|r| r.end.is_some())
            {
                return None; // the container exited
            }
            let sim = Arc::downgrade(&sim);
            let at = rkube_client::now();
            let text = render(ts, at, &line(&image, &container, n, at));
            Some((Ok(bytes::Bytes::from(text)), (None, n + 1, sim)))
        }
    });
    (
        StatusCode::OK,
        [("content-type", "text/plain")],
        Body::from_stream(stream),
    )
        .into_response()
}

pub fn router(sims: Sims) -> Router {
    Router::new()
        .route("/containerLogs/{ns}/{pod}/{container}", get(container_logs))
        .with_state(sims)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nginx_lines_look_like_nginx() {
        let start: DateTime<Utc> = "2026-01-01T00:00:00Z".parse().unwrap();
        let l = lines(
            "nginx:1.14.2",
            "nginx",
            start,
            start + k8s_openapi::chrono::Duration::seconds(11),
        );
        assert_eq!(
            l.len(),
            5 + 2,
            "start-up lines, then one access line per 5 s"
        );
        assert!(l[3].1.contains("Configuration complete"));
        assert!(
            l[5].1
                .starts_with("10.244.0.1 - - [01/Jan/2026:00:00:05 +0000] \"GET / HTTP/1.1\" 200"),
            "{}",
            l[5].1
        );
        let g = lines(
            "busybox",
            "app",
            start,
            start + k8s_openapi::chrono::Duration::seconds(10),
        );
        assert_eq!(g.len(), 3);
        assert_eq!(g[0].1, "app started (busybox)");
        assert_eq!(
            render(true, start, "x"),
            "2026-01-01T00:00:00.000000000Z x\n"
        );
    }
}
