//! The web view at `/ui/`, in a real headless browser (Debian's `chromium`, driven through
//! `chromedriver`'s WebDriver API): the page loads with no console errors, shows a newly
//! created Deployment's pods turn Running without a reload (its informers watch over
//! WebSocket), and the bookmark demo shows the seed's point — a filtered watch kept fresh by
//! bookmarks has its resourceVersion advance and never re-lists, while one without bookmarks
//! gets 410 and re-lists. Screenshots of each panel go to `target/ui-screenshots/` (the ones
//! in `docs/` come from here). Reports itself skipped, with the reason, where no chromium or
//! chromedriver is installed.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rkube_e2e::{free_port, wait_for, workspace_root, Cluster, Opts};
use serde_json::{json, Value};

/// A WebDriver session on a chromedriver this test started; both end on drop.
struct Browser {
    http: reqwest::Client,
    base: String,
    session: String,
    driver: Child,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    /// chromedriver and the browser it started share a process group of their own: all of
    /// it goes, even when the test failed half-way (killing chromedriver alone leaves chromium
    /// running).
    fn drop(&mut self) {
        let group = i32::try_from(self.driver.id())
            .ok()
            .and_then(rustix::process::Pid::from_raw);
        if let Some(group) = group {
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn find(env: &str, names: &[&str]) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(env) {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    names.iter().find_map(|n| {
        std::env::split_paths(&path)
            .map(|d| d.join(n))
            .find(|p| p.is_file())
    })
}

impl Browser {
    async fn start() -> Result<Browser, String> {
        let chromium = find(
            "RKUBE_CHROMIUM",
            &["chromium", "chromium-browser", "google-chrome"],
        )
        .ok_or("no chromium on PATH (Debian: apt-get install chromium)")?;
        let driver_bin = find("RKUBE_CHROMEDRIVER", &["chromedriver"])
            .ok_or("no chromedriver on PATH (Debian: apt-get install chromium-driver)")?;
        let port = free_port();
        use std::os::unix::process::CommandExt as _;
        let driver = Command::new(&driver_bin)
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("{}: {e}", driver_bin.display()))?;
        let profile = tempfile::tempdir().unwrap();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        let base = format!("http://127.0.0.1:{port}");
        let mut b = Browser {
            http,
            base,
            session: String::new(),
            driver,
            _profile: profile,
        };
        let status = format!("{}/status", b.base);
        wait_for("chromedriver to answer", Duration::from_secs(20), || {
            let http = b.http.clone();
            let status = status.clone();
            async move {
                let v: Value = http.get(&status).send().await.ok()?.json().await.ok()?;
                (v["value"]["ready"] == true).then_some(())
            }
        })
        .await;
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:loggingPrefs": {"browser": "ALL"},
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--hide-scrollbars", "--window-size=1400,1100",
                         format!("--user-data-dir={}", b._profile.path().display())],
            },
        }}});
        let v = b.post("/session", caps).await;
        b.session = v["sessionId"]
            .as_str()
            .ok_or_else(|| format!("chromedriver refused a session: {v}"))?
            .to_string();
        Ok(b)
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        let url = format!("{}{path}", self.base);
        let r = self.http.post(&url).json(&body).send().await.expect(&url);
        r.json::<Value>().await.expect("WebDriver answers JSON")["value"].take()
    }

    async fn session_post(&self, path: &str, body: Value) -> Value {
        self.post(&format!("/session/{}{path}", self.session), body)
            .await
    }

    async fn open(&self, url: &str) {
        self.session_post("/url", json!({ "url": url })).await;
    }

    /// Runs `script` (a function body) in the page; its return value.
    async fn eval(&self, script: &str) -> Value {
        self.session_post("/execute/sync", json!({ "script": script, "args": [] }))
            .await
    }

    async fn wait_until(&self, what: &str, script: &str) -> Value {
        wait_for(what, Duration::from_secs(90), || async {
            let v = self.eval(script).await;
            (!v.is_null() && v != false).then_some(v)
        })
        .await
    }

    async fn screenshot(&self, name: &str) {
        let url = format!("{}/session/{}/screenshot", self.base, self.session);
        let v = rkube_e2e::get_json(&self.http, &url).await;
        use base64::Engine as _;
        let png = base64::engine::general_purpose::STANDARD
            .decode(v["value"].as_str().expect("a screenshot"))
            .unwrap();
        let dir = workspace_root().join("target/ui-screenshots");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), png).unwrap();
    }

    /// The browser's console messages at SEVERE level (errors, failed loads).
    async fn console_errors(&self) -> Vec<String> {
        let v = self
            .session_post("/se/log", json!({"type": "browser"}))
            .await;
        v.as_array()
            .unwrap_or_else(|| panic!("chromedriver's browser log: {v}"))
            .iter()
            .filter(|e| e["level"] == "SEVERE")
            .map(|e| e["message"].as_str().unwrap_or_default().to_string())
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_view_shows_pods_turn_running_and_bookmarks_keep_a_filtered_watch_fresh() {
    let browser = match Browser::start().await {
        Ok(b) => b,
        Err(reason) => {
            eprintln!("skipped: {reason}");
            return;
        }
    };
    // Bookmarks every second and a short history, so the demo's point shows in seconds.
    let cluster = Cluster::start(Opts {
        nodes: 2,
        insecure: true,
        apiserver: vec![
            "--watch-bookmark-interval=1s".into(),
            "--watch-cache-history-window=2s".into(),
        ],
        ..Default::default()
    })
    .await;
    browser.open(&format!("{}/ui", cluster.server)).await;
    browser
        .wait_until(
            "the page's informers to list everything",
            "return document.body.dataset.ready === 'true'",
        )
        .await;
    // Set once; a reload would lose it.
    browser.eval("window.rkubeSameLoad = 42; return true").await;
    browser
        .wait_until(
            "the nodes drawn",
            "return document.querySelectorAll('[data-node]').length === 2",
        )
        .await;

    cluster.kubectl_ok(&[
        "create",
        "deployment",
        "ui-web",
        "--image=nginx",
        "--replicas=3",
    ]);
    browser
        .wait_until(
            "3 Running, ready pods of the new Deployment on the nodes",
            "return document.querySelectorAll(\
             '[data-node] [data-pod^=\"default/ui-web-\"][data-phase=\"Running\"][data-ready=\"true\"]'\
             ).length === 3",
        )
        .await;
    browser
        .wait_until(
            "Deployment → ReplicaSet → 3 Pods in the owner tree",
            "return document.querySelectorAll('[data-kind=\"Deployment\"][data-name=\"default/ui-web\"] \
             [data-kind=\"ReplicaSet\"] [data-kind=\"Pod\"]').length === 3",
        )
        .await;
    browser
        .wait_until(
            "the Deployment's events listed",
            "return [...document.querySelectorAll('#events li')].some(li => li.textContent.includes('ui-web'))",
        )
        .await;
    assert_eq!(
        browser.eval("return window.rkubeSameLoad").await,
        42,
        "the page was reloaded"
    );
    browser.screenshot("cluster.png").await;

    // The demo: two watches on a selector that matches nothing, while the page writes.
    browser
        .eval("document.getElementById('demo-toggle').click(); return true")
        .await;
    // One watch (one row, whose connection the demo drops every 10 s) whose resourceVersion
    // moved past the one it started from with bookmarks and no event.
    let advanced = browser
        .wait_until(
            "a demo watch's resourceVersion advanced by bookmarks alone",
            "const r = [...document.querySelectorAll('#watch-table tr[data-selector=\"rkube.io/demo=quiet\"]')]\
             .find(r => r.dataset.events === '0' && Number(r.dataset.bookmarks) > 0\
                        && Number(r.dataset.rv) > Number(r.dataset.start));\
             return r ? [r.dataset.watch, r.dataset.start, r.dataset.rv] : null",
        )
        .await;
    eprintln!("watch {advanced}: from, to resourceVersion on bookmarks, no events");
    browser
        .wait_until(
            "the watch without bookmarks to re-list after a 410",
            "const c = document.querySelector('.card[data-demo=\"false\"]');\
             return c && Number(c.dataset.relists) >= 1",
        )
        .await;
    let relisted = browser
        .eval(
            "const c = document.querySelector('.card[data-demo=\"true\"]');\
             return [Number(c.dataset.relists), c.querySelector('p:nth-of-type(2)').textContent]",
        )
        .await;
    assert_eq!(
        relisted[0], 0,
        "the watch kept fresh by bookmarks re-listed: {relisted}"
    );
    browser
        .eval("document.getElementById('demo').scrollIntoView({block: 'end'}); return true")
        .await;
    browser.screenshot("watches.png").await;
    browser
        .wait_until(
            "request rates and priority levels drawn",
            "return document.querySelectorAll('#rate-table td.num').length > 0 \
             && document.querySelectorAll('#apf-table td').length > 0",
        )
        .await;
    browser
        .eval("document.getElementById('chain').scrollIntoView(); return true")
        .await;
    browser.screenshot("chain.png").await;

    let problems = browser.eval("return window.rkubeProblems").await;
    assert_eq!(problems, json!([]), "the page recorded errors");
    let console = browser.console_errors().await;
    assert!(console.is_empty(), "console errors: {console:?}");
}
