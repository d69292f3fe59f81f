//! `kubectl exec`, `attach` and `port-forward` on the agent, where the apiserver proxies
//! them (upstream kubelet's `/exec/{ns}/{pod}/{container}`, `/attach/…`,
//! `/portForward/{ns}/{pod}`): the upgrade negotiated (WebSocket `v5.channel.k8s.io` or
//! `v4.channel.k8s.io`; SPDY/3.1 with `v4.channel.k8s.io`; port-forward over SPDY/3.1,
//! directly or tunnelled through WebSocket as `SPDY/3.1+portforward.k8s.io`), then the
//! session: a command of the simulated shell (`shell`) over the container's view (`view`),
//! an interactive shell on stdin, an attach following the container's output, or HTTP answers
//! on the pod's ports (`portforward`). Sessions are bounded: in number, in frame and message
//! size, and by an idle timeout.

pub mod portforward;
pub mod shell;
pub mod view;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use hyper_util::rt::TokioIo;
use k8s_openapi::chrono::{DateTime, Utc};
use rkube_client::{Client, Method};
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::logs::Sims;
use crate::stats::NodePods;
use crate::stream::spdy::{self, Frame, FrameReader, FrameWriter};
use crate::stream::websocket::{self as ws, Msg};
use shell::{Action, Plan, Shell, View};

/// A session with nothing received for this long ends (the kubelet's
/// `--streaming-connection-idle-timeout`).
const IDLE: Duration = Duration::from_secs(4 * 3600);
/// How long a client has to open its streams after the upgrade.
const STREAMS_DEADLINE: Duration = Duration::from_secs(30);
/// A write that cannot complete for this long ends the session.
const WRITE_TIMEOUT: Duration = Duration::from_secs(60);
/// The largest WebSocket message or SPDY frame accepted.
const MAX_FRAME: usize = 1024 * 1024;
/// Streaming sessions at once, across the process's nodes.
const MAX_SESSIONS: usize = 256;
/// Port-forward connections at once in one session.
const MAX_FORWARDS: usize = 128;
/// The most of an HTTP request head kept.
const MAX_HEAD: usize = 64 * 1024;
/// An interactive shell's longest line.
const MAX_LINE: usize = 64 * 1024;
/// How long a WebSocket session's command takes to start, as a runtime's exec takes a moment.
/// client-go sets up its channels only after the handshake and drops what arrives on a channel
/// it has not set up yet: a command answered at once lost its output or its exit status (kubectl
/// 1.33 `exec` failed about one time in five here, the bytes already buffered with the 101).
const WS_START: Duration = Duration::from_millis(20);

#[derive(Clone)]
pub struct Streaming {
    pub sims: Sims,
    pub pods: NodePods,
    /// Each node's client (its own identity when configured).
    pub clients: Arc<BTreeMap<String, Client>>,
    pub sessions: Arc<Semaphore>,
}

impl Streaming {
    pub fn new(sims: Sims, pods: NodePods, clients: BTreeMap<String, Client>) -> Self {
        Streaming {
            sims,
            pods,
            clients: Arc::new(clients),
            sessions: Arc::new(Semaphore::new(MAX_SESSIONS)),
        }
    }

    /// The pod (as JSON, read fresh) and the client of the node running it.
    async fn pod(&self, ns: &str, name: &str) -> Option<(Value, Client)> {
        let node = {
            let nodes = self.pods.read().unwrap();
            nodes
                .iter()
                .find(|(_, store)| store.get_in(ns, name).is_some())
                .map(|(n, _)| n.clone())?
        };
        let client = self.clients.get(&node)?.clone();
        let path = format!(
            "/api/v1/namespaces/{}/pods/{}",
            rkube_client::client::encode(ns),
            rkube_client::client::encode(name)
        );
        let pod = client
            .send_json::<Value>(Method::GET, &path, None)
            .await
            .ok()?;
        Some((pod, client))
    }

    /// When the container's current run started, while it runs.
    fn run_start(&self, ns: &str, pod: &str, container: &str) -> Option<DateTime<Utc>> {
        let sim = self
            .sims
            .lock()
            .unwrap()
            .get(&format!("{ns}/{pod}"))
            .cloned()?;
        let run = sim.lock().unwrap().log_run(container, false, pod).ok()?;
        run.end.is_none().then_some(run.start)
    }
}

pub fn router(state: Streaming) -> Router {
    Router::new()
        .route("/exec/{ns}/{pod}/{container}", get(exec).post(exec))
        .route("/attach/{ns}/{pod}/{container}", get(attach).post(attach))
        .route(
            "/portForward/{ns}/{pod}",
            get(port_forward).post(port_forward),
        )
        .with_state(state)
}

/// The options of an exec or attach, under the apiserver's names or the kubelet's.
#[derive(Clone, Debug, Default)]
struct Opts {
    command: Vec<String>,
    stdin: bool,
    stdout: bool,
    stderr: bool,
    tty: bool,
}

fn opts(query: &str) -> Opts {
    let pairs = rkube_api::options::parse_query(query);
    let flag = |names: [&str; 2]| {
        pairs
            .iter()
            .any(|(k, v)| names.contains(&k.as_str()) && !matches!(v.as_str(), "0" | "false"))
    };
    Opts {
        command: pairs
            .iter()
            .filter(|(k, _)| k == "command")
            .map(|(_, v)| v.clone())
            .take(1024)
            .collect(),
        stdin: flag(["stdin", "input"]),
        stdout: flag(["stdout", "output"]),
        stderr: flag(["stderr", "error"]),
        tty: flag(["tty", "tty"]),
    }
}

/// Every value of a header, comma-separated lists split.
fn header_values(h: &HeaderMap, name: &str) -> Vec<String> {
    h.get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect()
}

/// The protocol both sides speak.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Wire {
    /// WebSocket channels; `true` for v5 (with its close signal).
    WebSocket(bool),
    Spdy,
    /// SPDY frames inside WebSocket binary messages (port-forward).
    Tunnel,
}

fn refuse(code: StatusCode, msg: impl Into<String>) -> Response {
    (code, format!("{}\n", msg.into())).into_response()
}

fn is_websocket(req: &Request) -> bool {
    req.headers()
        .get("upgrade")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

/// Picks the protocol and builds the 101 answer, or says why not.
fn negotiate(req: &Request, offered: &[&str]) -> Result<(Wire, Response), Box<Response>> {
    let h = req.headers();
    let upgrade = h
        .get("upgrade")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    if upgrade == "websocket" {
        let key = h
            .get("sec-websocket-key")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if key.is_empty() {
            return Err(Box::new(refuse(
                StatusCode::BAD_REQUEST,
                "missing Sec-WebSocket-Key",
            )));
        }
        let asked = header_values(h, "sec-websocket-protocol");
        let Some(p) = asked.iter().find(|p| offered.contains(&p.as_str())) else {
            return Err(Box::new(refuse(
                StatusCode::BAD_REQUEST,
                format!("unable to negotiate protocol: client supports {asked:?}, server supports {offered:?}"),
            )));
        };
        let wire = match p.as_str() {
            "SPDY/3.1+portforward.k8s.io" => Wire::Tunnel,
            "v5.channel.k8s.io" => Wire::WebSocket(true),
            _ => Wire::WebSocket(false),
        };
        let resp = Response::builder()
            .status(StatusCode::SWITCHING_PROTOCOLS)
            .header("upgrade", "websocket")
            .header("connection", "Upgrade")
            .header("sec-websocket-accept", ws::accept_key(key))
            .header("sec-websocket-protocol", p.as_str())
            .body(axum::body::Body::empty())
            .expect("valid headers");
        return Ok((wire, resp));
    }
    if upgrade.starts_with("spdy/3.1") {
        let asked = header_values(h, "x-stream-protocol-version");
        let Some(p) = asked.iter().find(|p| offered.contains(&p.as_str())) else {
            return Err(Box::new(refuse(
                StatusCode::FORBIDDEN,
                format!("unable to upgrade: unable to negotiate protocol: client supports {asked:?}, server supports {offered:?}"),
            )));
        };
        let resp = Response::builder()
            .status(StatusCode::SWITCHING_PROTOCOLS)
            .header("upgrade", "SPDY/3.1")
            .header("connection", "Upgrade")
            .header("x-stream-protocol-version", p.as_str())
            .body(axum::body::Body::empty())
            .expect("valid headers");
        return Ok((Wire::Spdy, resp));
    }
    Err(Box::new(refuse(
        StatusCode::BAD_REQUEST,
        "Upgrade request required",
    )))
}

/// What a remote-command session runs.
enum Job {
    Exec {
        view: View,
        argv: Vec<String>,
    },
    /// An interactive shell on the container's own stdin (`kubectl run -it … -- sh`); the
    /// container exits when it does.
    Shell {
        sims: Sims,
        key: String,
        container: String,
        stdin_once: bool,
        /// The run attached to: only it is ended, and the session ends with it.
        started: DateTime<Utc>,
        view: View,
        name: String,
    },
    /// The container's output from now on, until it exits.
    Follow {
        sims: Sims,
        key: String,
        container: String,
        image: String,
    },
}

async fn exec(
    State(st): State<Streaming>,
    Path((ns, pod, container)): Path<(String, String, String)>,
    req: Request,
) -> Response {
    let o = opts(req.uri().query().unwrap_or(""));
    if o.command.is_empty() {
        return refuse(
            StatusCode::BAD_REQUEST,
            "you must specify at least one command for the container",
        );
    }
    remote_command(st, ns, pod, container, o, true, req).await
}

async fn attach(
    State(st): State<Streaming>,
    Path((ns, pod, container)): Path<(String, String, String)>,
    req: Request,
) -> Response {
    let o = opts(req.uri().query().unwrap_or(""));
    remote_command(st, ns, pod, container, o, false, req).await
}

/// The shell a container runs, if its command is one (for attach).
fn container_shell(c: &Value) -> Option<String> {
    let argv: Vec<&str> = c["command"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(c["args"].as_array().into_iter().flatten())
        .filter_map(Value::as_str)
        .collect();
    shell::container_shell(&argv, c["image"].as_str().unwrap_or(""))
}

#[allow(clippy::too_many_arguments)]
async fn remote_command(
    st: Streaming,
    ns: String,
    pod: String,
    container: String,
    o: Opts,
    is_exec: bool,
    mut req: Request,
) -> Response {
    let Ok(permit) = st.sessions.clone().try_acquire_owned() else {
        return refuse(
            StatusCode::TOO_MANY_REQUESTS,
            "too many streaming sessions on this node",
        );
    };
    // Negotiated first: nothing is read for a request that cannot be served.
    let offered: &[&str] = if is_websocket(&req) {
        &["v5.channel.k8s.io", "v4.channel.k8s.io"]
    } else {
        &["v4.channel.k8s.io"]
    };
    let (wire, resp) = match negotiate(&req, offered) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let Some((pod_obj, client)) = st.pod(&ns, &pod).await else {
        return refuse(
            StatusCode::NOT_FOUND,
            format!("pod {ns}/{pod} not found on this node"),
        );
    };
    let Some(started) = st.run_start(&ns, &pod, &container) else {
        return refuse(
            StatusCode::NOT_FOUND,
            format!("container not found (\"{container}\")"),
        );
    };
    let spec = view::container_spec(&pod_obj, &container)
        .cloned()
        .unwrap_or(Value::Null);
    let job = if is_exec {
        Job::Exec {
            view: view::build(&client, &pod_obj, &container).await,
            argv: o.command.clone(),
        }
    } else {
        match container_shell(&spec).filter(|_| o.stdin && spec["stdin"] == true) {
            Some(name) => Job::Shell {
                view: view::build(&client, &pod_obj, &container).await,
                name,
                sims: st.sims.clone(),
                key: format!("{ns}/{pod}"),
                container: container.clone(),
                stdin_once: spec["stdinOnce"] == true,
                started,
            },
            None => Job::Follow {
                sims: st.sims.clone(),
                key: format!("{ns}/{pod}"),
                container: container.clone(),
                image: spec["image"].as_str().unwrap_or("").to_string(),
            },
        }
    };
    let upgrade = hyper::upgrade::on(&mut req);
    tracing::info!(%ns, %pod, %container, exec = is_exec, ?wire, "streaming session");
    tokio::spawn(async move {
        let _permit = permit;
        let io = match upgrade.await {
            Ok(u) => TokioIo::new(u),
            Err(e) => {
                tracing::debug!(error = %e, "upgrade failed");
                return;
            }
        };
        let (rd, wr) = tokio::io::split(io);
        let (wire_tx, wire_rx) = mpsc::channel::<Vec<u8>>(64);
        let writer = tokio::spawn(write_loop(wr, wire_rx));
        match wire {
            Wire::WebSocket(v5) => ws_session(rd, wire_tx, v5, o, job).await,
            _ => spdy_session(rd, wire_tx, o, job).await,
        }
        let _ = tokio::time::timeout(WRITE_TIMEOUT, writer).await;
    });
    resp
}

/// Writes what the session sends until every sender is gone, then closes the connection.
async fn write_loop<W: AsyncWrite + Unpin>(mut w: W, mut rx: mpsc::Receiver<Vec<u8>>) {
    while let Some(b) = rx.recv().await {
        match tokio::time::timeout(WRITE_TIMEOUT, async {
            w.write_all(&b).await?;
            w.flush().await
        })
        .await
        {
            Ok(Ok(())) => {}
            _ => return,
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), w.shutdown()).await;
}

/// Channel numbers of the remote-command protocols.
const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;

/// The v4 status a session ends with: success, a non-zero exit code, or an error.
fn status(result: &Result<i32, String>, argv: &[String]) -> Vec<u8> {
    let v = match result {
        Ok(0) => json!({"metadata": {}, "status": "Success"}),
        Ok(code) => json!({
            "metadata": {}, "status": "Failure",
            "message": format!("command terminated with non-zero exit code: error executing command {argv:?}, exit code {code}"),
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
        }),
        Err(msg) => {
            json!({"metadata": {}, "status": "Failure", "message": msg, "reason": "InternalError", "code": 500})
        }
    };
    serde_json::to_vec(&v).unwrap_or_default()
}

/// Output of the job: (channel, bytes).
type Out = mpsc::Sender<(u8, Vec<u8>)>;

/// Runs the job: its exit code, or why it could not run.
async fn run(
    job: Job,
    o: &Opts,
    stdin: Option<mpsc::Receiver<Vec<u8>>>,
    out: Out,
    cancel: CancellationToken,
) -> Result<i32, String> {
    let tty = o.tty;
    match job {
        Job::Exec { view, argv } => {
            let mut sh = Shell::new(&view, "sh", rkube_client::now());
            match sh.exec(&argv) {
                Plan::Run(actions, code) => {
                    drop(stdin);
                    perform(actions, tty, &out, &cancel).await;
                    Ok(code)
                }
                Plan::Interactive => {
                    let name = sh.name.clone();
                    Ok(interactive(&view, &name, tty, stdin, &out, &cancel).await.0)
                }
            }
        }
        Job::Shell {
            view,
            name,
            sims,
            key,
            container,
            stdin_once,
            started,
        } => {
            let this_run = {
                let (sims, key, container) = (sims.clone(), key.clone(), container.clone());
                move || {
                    let sim = sims.lock().unwrap().get(&key).cloned();
                    sim.and_then(|s| s.lock().unwrap().log_run(&container, false, "").ok())
                        .is_some_and(|r| r.end.is_none() && r.start == started)
                }
            };
            // The shell stops when its client goes or when the run it is ends otherwise
            // (the pod deleted, another attach's `exit`, a restart).
            let done = cancel.child_token();
            let watcher = {
                let (done, this_run) = (done.clone(), this_run.clone());
                tokio::spawn(async move {
                    loop {
                        tokio::select! {
                            _ = done.cancelled() => return,
                            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                        }
                        if !this_run() {
                            done.cancel();
                            return;
                        }
                    }
                })
            };
            let (code, exited) = interactive(&view, &name, tty, stdin, &out, &done).await;
            done.cancel();
            let _ = watcher.await;
            // The container's process is this shell: when it exits, or its stdin closes for
            // good with the first attach gone (`stdinOnce`), the container exits with it.
            if (exited || stdin_once) && this_run() {
                let sim = sims.lock().unwrap().get(&key).cloned();
                if let Some(sim) = sim {
                    sim.lock().unwrap().end_run(
                        &container,
                        code,
                        tokio::time::Instant::now(),
                        rkube_client::now(),
                    );
                }
            }
            Ok(code)
        }
        Job::Follow {
            sims,
            key,
            container,
            image,
        } => {
            drop(stdin);
            let mut n = 0u64;
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => return Ok(0),
                    _ = tokio::time::sleep(crate::logs::LINE_EVERY) => {}
                }
                let sim = sims.lock().unwrap().get(&key).cloned();
                let run = sim.and_then(|s| s.lock().unwrap().log_run(&container, false, "").ok());
                match run {
                    Some(r) if r.end.is_none() => {}
                    _ => return Ok(0),
                }
                n += 1;
                let at = rkube_client::now();
                let line = format!("{}\n", crate::logs::line(&image, &container, 5 + n, at));
                if !perform(vec![Action::Out(line.into_bytes())], tty, &out, &cancel).await {
                    return Ok(0);
                }
            }
        }
    }
}

/// `\n` as a terminal shows it: `\r\n`.
fn crlf(data: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(data.len() + 8);
    for &b in data {
        if b == b'\n' {
            v.push(b'\r');
        }
        v.push(b);
    }
    v
}

/// A shell reading commands from stdin: with a terminal, it echoes, edits (backspace,
/// ^C, ^D) and prompts; without one it runs each line it reads. Ends at `exit`, at the end
/// of stdin, or when the client goes: its exit code, and whether it exited (`exit`, or ^D
/// on a terminal) rather than lost its client.
async fn interactive(
    view: &View,
    name: &str,
    tty: bool,
    stdin: Option<mpsc::Receiver<Vec<u8>>>,
    out: &Out,
    cancel: &CancellationToken,
) -> (i32, bool) {
    let Some(mut stdin) = stdin else {
        return (0, false);
    };
    let mut sh = Shell::new(view, name, rkube_client::now());
    let say = |b: Vec<u8>| {
        let out = out.clone();
        async move {
            tokio::select! {
                _ = cancel.cancelled() => {}
                _ = out.send((STDOUT, b)) => {}
            }
        }
    };
    if tty {
        say(sh.prompt().into_bytes()).await;
    }
    let mut line: Vec<u8> = Vec::new();
    loop {
        let chunk = tokio::select! {
            _ = cancel.cancelled() => return (sh.last, false),
            c = stdin.recv() => c,
        };
        let Some(chunk) = chunk else {
            if !tty && !line.is_empty() {
                let text = String::from_utf8_lossy(&line).into_owned();
                perform(sh.line(&text), tty, out, cancel).await;
            }
            // The client's input ended: the shell exits only if that was its `exit`.
            return (sh.last, sh.exited);
        };
        for b in chunk {
            match b {
                b'\r' | b'\n' if tty || b == b'\n' => {
                    if tty {
                        say(b"\r\n".to_vec()).await;
                    }
                    let text = String::from_utf8_lossy(&line).into_owned();
                    line.clear();
                    perform(sh.line(&text), tty, out, cancel).await;
                    if sh.exited || cancel.is_cancelled() {
                        return (sh.last, sh.exited);
                    }
                    sh.now_is(rkube_client::now());
                    if tty {
                        say(sh.prompt().into_bytes()).await;
                    }
                }
                0x7f | 0x08 if tty => {
                    if line.pop().is_some() {
                        say(b"\x08 \x08".to_vec()).await;
                    }
                }
                0x03 if tty => {
                    line.clear();
                    say(format!("^C\r\n{}", sh.prompt()).into_bytes()).await;
                }
                0x04 if tty && line.is_empty() => {
                    say(b"\r\n".to_vec()).await;
                    return (sh.last, true);
                }
                b => {
                    if line.len() < MAX_LINE {
                        line.push(b);
                        if tty {
                            say(vec![b]).await;
                        }
                    }
                }
            }
        }
    }
}

/// Carries out a command's effects in order: output to its channel (stderr into stdout on a
/// terminal, `\n` as `\r\n` there), sleeps slept; false when the client went first.
async fn perform(actions: Vec<Action>, tty: bool, out: &Out, cancel: &CancellationToken) -> bool {
    for a in actions {
        let (ch, data) = match a {
            Action::Out(d) => (STDOUT, d),
            Action::Err(d) => (if tty { STDOUT } else { STDERR }, d),
            Action::Sleep(d) => {
                tokio::select! {
                    _ = cancel.cancelled() => return false,
                    _ = tokio::time::sleep(d) => {}
                }
                continue;
            }
        };
        let data = if tty { crlf(&data) } else { data };
        tokio::select! {
            _ = cancel.cancelled() => return false,
            _ = out.send((ch, data)) => {}
        }
    }
    true
}

impl Job {
    /// The command, for the status of its exit.
    fn argv(&self) -> Vec<String> {
        match self {
            Job::Exec { argv, .. } => argv.clone(),
            _ => Vec::new(),
        }
    }
}

/// The channel stdin is passed through, when the client sends one.
type StdinPair = (
    Option<mpsc::Sender<Vec<u8>>>,
    Option<mpsc::Receiver<Vec<u8>>>,
);

fn stdin_pair(o: &Opts) -> StdinPair {
    if o.stdin {
        let (t, r) = mpsc::channel::<Vec<u8>>(256);
        (Some(t), Some(r))
    } else {
        (None, None)
    }
}

/// A WebSocket binary message on channel `ch` (the channel protocols' framing).
fn channel_frame(ch: u8, data: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(data.len() + 1);
    m.push(ch);
    m.extend_from_slice(data);
    ws::frame(ws::OP_BINARY, &m)
}

/// A remote-command session over WebSocket channels.
async fn ws_session<R: AsyncRead + Unpin + Send + 'static>(
    rd: R,
    wire: mpsc::Sender<Vec<u8>>,
    v5: bool,
    o: Opts,
    job: Job,
) {
    // An empty message on the lowest writable channel says the session is up (as the
    // kubelet does).
    let first = if o.stdout {
        STDOUT
    } else if o.stderr {
        STDERR
    } else {
        ERROR
    };
    let _ = wire.send(channel_frame(first, &[])).await;
    tokio::time::sleep(WS_START).await;
    let cancel = CancellationToken::new();
    let (stdin_tx, stdin_rx) = stdin_pair(&o);
    let reader = {
        let (wire, cancel) = (wire.clone(), cancel.clone());
        tokio::spawn(async move {
            let mut r = ws::Reader::new(rd, MAX_FRAME);
            let mut stdin = stdin_tx;
            loop {
                let msg = tokio::select! {
                    _ = cancel.cancelled() => break,
                    m = tokio::time::timeout(IDLE, r.next()) => m,
                };
                match msg {
                    Ok(Ok(Some(Msg::Binary(m)))) => match m.split_first() {
                        Some((&STDIN, data)) => {
                            if let Some(tx) = &stdin {
                                tokio::select! {
                                    _ = cancel.cancelled() => break,
                                    sent = tx.send(data.to_vec()) => if sent.is_err() { stdin = None },
                                }
                            }
                        }
                        // v5: the client closed a channel (stdin: end of input).
                        Some((255, [STDIN])) if v5 => stdin = None,
                        _ => {}
                    },
                    Ok(Ok(Some(Msg::Ping(p)))) => {
                        let _ = wire.send(ws::frame(ws::OP_PONG, &p)).await;
                    }
                    Ok(Ok(Some(Msg::Text(_)))) => {}
                    _ => break,
                }
            }
            cancel.cancel();
        })
    };
    let (out_tx, mut out_rx) = mpsc::channel::<(u8, Vec<u8>)>(64);
    let argv = job.argv();
    let forward = async {
        while let Some((ch, data)) = out_rx.recv().await {
            if wire.send(channel_frame(ch, &data)).await.is_err() {
                cancel.cancel();
            }
        }
    };
    let (result, _) = tokio::join!(run(job, &o, stdin_rx, out_tx, cancel.clone()), forward);
    if !cancel.is_cancelled() {
        let _ = wire
            .send(channel_frame(ERROR, &status(&result, &argv)))
            .await;
        let _ = wire.send(ws::close_frame(1000)).await;
    }
    cancel.cancel();
    let _ = reader.await;
}

/// Which stream carries what, as the client opened them.
#[derive(Default)]
struct Streams {
    error: Option<u32>,
    stdin: Option<u32>,
    stdout: Option<u32>,
    stderr: Option<u32>,
    resize: Option<u32>,
}

impl Streams {
    fn complete(&self, o: &Opts) -> bool {
        self.error.is_some()
            && (!o.stdin || self.stdin.is_some())
            && (!o.stdout || self.stdout.is_some())
            && (!o.stderr || o.tty || self.stderr.is_some())
    }
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> &'a str {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map_or("", |(_, v)| v.as_str())
}

/// A remote-command session over SPDY streams.
async fn spdy_session<R: AsyncRead + Unpin + Send + 'static>(
    rd: R,
    wire: mpsc::Sender<Vec<u8>>,
    o: Opts,
    job: Job,
) {
    let mut frames = FrameReader::new(rd, MAX_FRAME);
    let mut fw = FrameWriter::default();
    let mut streams = Streams::default();
    let deadline = tokio::time::Instant::now() + STREAMS_DEADLINE;
    // The client opens its streams first; each is acknowledged.
    while !streams.complete(&o) {
        let f = match tokio::time::timeout_at(deadline, frames.next()).await {
            Ok(Ok(Some(f))) => f,
            other => {
                tracing::debug!(end = ?other.map(|r| r.map(|_| ())), "the client did not open its streams");
                return;
            }
        };
        match f {
            Frame::SynStream { id, headers, .. } => {
                let slot = match header(&headers, "streamtype") {
                    "error" => &mut streams.error,
                    "stdin" => &mut streams.stdin,
                    "stdout" => &mut streams.stdout,
                    "stderr" => &mut streams.stderr,
                    "resize" => &mut streams.resize,
                    _ => {
                        let _ = wire
                            .send(FrameWriter::rst_stream(id, spdy::REFUSED_STREAM))
                            .await;
                        continue;
                    }
                };
                *slot = Some(id);
                let _ = wire.send(fw.syn_reply(id, &[])).await;
            }
            Frame::Ping(id) => {
                let _ = wire.send(FrameWriter::ping(id)).await;
            }
            Frame::GoAway | Frame::RstStream { .. } => return,
            _ => {}
        }
    }
    let cancel = CancellationToken::new();
    let (stdin_tx, stdin_rx) = stdin_pair(&o);
    let (stdin_id, resize_id) = (streams.stdin, streams.resize);
    let reader = {
        let (wire, cancel) = (wire.clone(), cancel.clone());
        tokio::spawn(async move {
            let mut stdin = stdin_tx;
            loop {
                let f = tokio::select! {
                    _ = cancel.cancelled() => break,
                    f = tokio::time::timeout(IDLE, frames.next()) => f,
                };
                match f {
                    Ok(Ok(Some(Frame::Data { id, fin, data }))) if Some(id) == stdin_id => {
                        if let Some(tx) = stdin.as_ref().filter(|_| !data.is_empty()) {
                            tokio::select! {
                                _ = cancel.cancelled() => break,
                                sent = tx.send(data) => if sent.is_err() { stdin = None },
                            }
                        }
                        if fin {
                            stdin = None;
                        }
                    }
                    Ok(Ok(Some(Frame::SynStream { id, .. }))) => {
                        let _ = wire.send(fw.syn_reply(id, &[])).await;
                    }
                    Ok(Ok(Some(Frame::Ping(id)))) => {
                        let _ = wire.send(FrameWriter::ping(id)).await;
                    }
                    Ok(Ok(Some(Frame::Data { .. } | Frame::Other))) => {}
                    // Closing its stdin or resize stream does not end the session.
                    Ok(Ok(Some(Frame::RstStream { id })))
                        if Some(id) == stdin_id || Some(id) == resize_id => {}
                    _ => break,
                }
            }
            cancel.cancel();
        })
    };
    let (out_tx, mut out_rx) = mpsc::channel::<(u8, Vec<u8>)>(64);
    let argv = job.argv();
    let (out_id, err_id) = (streams.stdout, streams.stderr.or(streams.stdout));
    let forward = async {
        while let Some((ch, data)) = out_rx.recv().await {
            let id = if ch == STDERR { err_id } else { out_id };
            if let Some(id) = id {
                if wire
                    .send(FrameWriter::data(id, false, &data))
                    .await
                    .is_err()
                {
                    // The client is gone: the job stops, its output is drained.
                    cancel.cancel();
                }
            }
        }
    };
    let (result, _) = tokio::join!(run(job, &o, stdin_rx, out_tx, cancel.clone()), forward);
    if !cancel.is_cancelled() {
        for id in [streams.stdout, streams.stderr].into_iter().flatten() {
            let _ = wire.send(FrameWriter::data(id, true, &[])).await;
        }
        if let Some(id) = streams.error {
            let _ = wire
                .send(FrameWriter::data(id, true, &status(&result, &argv)))
                .await;
        }
        let _ = wire.send(FrameWriter::goaway(0)).await;
    }
    cancel.cancel();
    let _ = reader.await;
}

async fn port_forward(
    State(st): State<Streaming>,
    Path((ns, pod)): Path<(String, String)>,
    mut req: Request,
) -> Response {
    let Ok(permit) = st.sessions.clone().try_acquire_owned() else {
        return refuse(
            StatusCode::TOO_MANY_REQUESTS,
            "too many streaming sessions on this node",
        );
    };
    let Some((pod_obj, _)) = st.pod(&ns, &pod).await else {
        return refuse(
            StatusCode::NOT_FOUND,
            format!("pod {ns}/{pod} not found on this node"),
        );
    };
    let (wire, resp) = match negotiate(
        &req,
        &[
            "portforward.k8s.io",
            "SPDY/3.1+portforward.k8s.io",
            "v4.channel.k8s.io",
        ],
    ) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    // WebSocket channels (the Python client's and kube-rs's port-forward): the ports are
    // named in the query, two channels each.
    let ports: Vec<u16> = rkube_api::options::parse_query(req.uri().query().unwrap_or(""))
        .into_iter()
        .filter(|(k, _)| k == "ports")
        .flat_map(|(_, v)| v.split(',').map(str::to_string).collect::<Vec<_>>())
        .filter_map(|p| p.trim().parse().ok())
        .filter(|p| *p > 0)
        .take(64)
        .collect();
    if matches!(wire, Wire::WebSocket(_)) && ports.is_empty() {
        return refuse(
            StatusCode::BAD_REQUEST,
            "query parameter \"port\" is required",
        );
    }
    let upgrade = hyper::upgrade::on(&mut req);
    tracing::info!(%ns, %pod, ?wire, "port-forward session");
    tokio::spawn(async move {
        let _permit = permit;
        let Ok(u) = upgrade.await else { return };
        let (rd, wr) = tokio::io::split(TokioIo::new(u));
        let (wire_tx, wire_rx) = mpsc::channel::<Vec<u8>>(64);
        let writer = tokio::spawn(write_loop(wr, wire_rx));
        if let Wire::WebSocket(_) = wire {
            ws_forward_session(rd, wire_tx, &pod_obj, &ports).await;
        } else if wire == Wire::Tunnel {
            // WebSocket messages in, a byte stream of SPDY frames out of the pipe; our
            // frames out, each in a binary message.
            let (pipe_rd, mut pipe_wr) = tokio::io::duplex(256 * 1024);
            let (framed_tx, mut framed_rx) = mpsc::channel::<Vec<u8>>(64);
            let pong = wire_tx.clone();
            let unwrap = tokio::spawn(async move {
                let mut r = ws::Reader::new(rd, MAX_FRAME);
                while let Ok(Ok(Some(m))) = tokio::time::timeout(IDLE, r.next()).await {
                    match m {
                        Msg::Binary(b) => {
                            if pipe_wr.write_all(&b).await.is_err() {
                                break;
                            }
                        }
                        Msg::Ping(p) => {
                            let _ = pong.send(ws::frame(ws::OP_PONG, &p)).await;
                        }
                        Msg::Text(_) => {}
                        Msg::Close => break,
                    }
                }
            });
            let wrap = {
                let wire_tx = wire_tx.clone();
                tokio::spawn(async move {
                    while let Some(b) = framed_rx.recv().await {
                        if wire_tx.send(ws::frame(ws::OP_BINARY, &b)).await.is_err() {
                            break;
                        }
                    }
                    let _ = wire_tx.send(ws::close_frame(1000)).await;
                })
            };
            drop(wire_tx);
            forward_session(pipe_rd, framed_tx, &pod_obj).await;
            unwrap.abort();
            let _ = wrap.await;
        } else {
            forward_session(rd, wire_tx, &pod_obj).await;
        }
        let _ = tokio::time::timeout(WRITE_TIMEOUT, writer).await;
    });
    resp
}

/// Port-forward over WebSocket channels: port `i` of the query has data channel `2i` and
/// error channel `2i+1`, each opened with the port number (two bytes, little endian). The
/// first HTTP request on a port is answered (or the port's error sent), then the session
/// closes, which closes the client's local connections.
async fn ws_forward_session<R: AsyncRead + Unpin>(
    rd: R,
    wire: mpsc::Sender<Vec<u8>>,
    pod: &Value,
    ports: &[u16],
) {
    let uid = pod["metadata"]["uid"].as_str().unwrap_or("");
    for (i, port) in ports.iter().enumerate() {
        for ch in [2 * i as u8, 2 * i as u8 + 1] {
            let _ = wire.send(channel_frame(ch, &port.to_le_bytes())).await;
        }
    }
    // Ports nothing listens on fail at once, on their error channel.
    let mut open = ports.len();
    for (i, port) in ports.iter().enumerate() {
        if portforward::listener(pod, *port).is_none() {
            let msg = format!(
                "error forwarding port {port} to pod {uid}, uid : failed to connect to localhost:{port} inside namespace \"{uid}\", IPv4: dial tcp4 127.0.0.1:{port}: connect: connection refused "
            );
            let _ = wire
                .send(channel_frame(2 * i as u8 + 1, msg.as_bytes()))
                .await;
            open -= 1;
        }
    }
    let mut heads: Vec<Vec<u8>> = vec![Vec::new(); ports.len()];
    let mut answered = vec![false; ports.len()];
    let mut r = ws::Reader::new(rd, MAX_FRAME);
    while open > 0 {
        let msg = match tokio::time::timeout(IDLE, r.next()).await {
            Ok(Ok(Some(m))) => m,
            _ => break,
        };
        let data = match msg {
            Msg::Binary(d) => d,
            Msg::Ping(p) => {
                let _ = wire.send(ws::frame(ws::OP_PONG, &p)).await;
                continue;
            }
            Msg::Text(_) => continue,
            Msg::Close => break,
        };
        let Some((&ch, bytes)) = data.split_first() else {
            continue;
        };
        let i = usize::from(ch / 2);
        if ch % 2 != 0 || i >= ports.len() || answered[i] {
            continue;
        }
        let head = &mut heads[i];
        let room = MAX_HEAD.saturating_sub(head.len());
        head.extend_from_slice(&bytes[..bytes.len().min(room)]);
        let Some(end) = portforward::head_end(head) else {
            if head.len() >= MAX_HEAD {
                answered[i] = true;
                open -= 1;
            }
            continue;
        };
        let now = rkube_client::now()
            .format("%a, %d %b %Y %H:%M:%S GMT")
            .to_string();
        let answer = portforward::answer(pod, ports[i], &head[..end], &now);
        for chunk in answer.chunks(32 * 1024) {
            let _ = wire.send(channel_frame(ch, chunk)).await;
        }
        answered[i] = true;
        open -= 1;
    }
    let _ = wire.send(ws::close_frame(1000)).await;
}

/// One forwarded connection: its two streams and what its client has sent.
#[derive(Default)]
struct Forward {
    port: u16,
    error: Option<u32>,
    data: Option<u32>,
    head: Vec<u8>,
    /// How far `head` has been searched for its end.
    scanned: usize,
    done: bool,
}

/// Port-forward streams over SPDY: each connection is a pair of streams (`error`, `data`)
/// under one `requestid`; its HTTP request is answered and both streams closed.
async fn forward_session<R: AsyncRead + Unpin>(rd: R, wire: mpsc::Sender<Vec<u8>>, pod: &Value) {
    let mut frames = FrameReader::new(rd, MAX_FRAME);
    let mut fw = FrameWriter::default();
    let mut forwards: HashMap<String, Forward> = HashMap::new();
    let mut by_stream: HashMap<u32, String> = HashMap::new();
    let uid = pod["metadata"]["uid"].as_str().unwrap_or("").to_string();
    loop {
        let f = match tokio::time::timeout(IDLE, frames.next()).await {
            Ok(Ok(Some(f))) => f,
            other => {
                tracing::debug!(end = ?other.map(|r| r.map(|_| ())), "port-forward session ends");
                break;
            }
        };
        let request = match f {
            Frame::SynStream { id, headers, .. } => {
                let rid = header(&headers, "requestid").to_string();
                let port: Option<u16> = header(&headers, "port").parse().ok().filter(|p| *p > 0);
                let kind = header(&headers, "streamtype");
                let fwd = forwards.get(&rid);
                // One error and one data stream per connection, a bounded number of them.
                let taken = match kind {
                    "error" => fwd.is_some_and(|f| f.error.is_some()),
                    "data" => fwd.is_some_and(|f| f.data.is_some()),
                    _ => true,
                };
                let full = fwd.is_none() && forwards.len() >= MAX_FORWARDS;
                let Some(port) = port.filter(|_| !taken && !full) else {
                    let _ = wire
                        .send(FrameWriter::rst_stream(id, spdy::REFUSED_STREAM))
                        .await;
                    continue;
                };
                let kind = kind.to_string();
                let _ = wire.send(fw.syn_reply(id, &[])).await;
                let fwd = forwards.entry(rid.clone()).or_default();
                fwd.port = port;
                if kind == "error" {
                    fwd.error = Some(id);
                } else {
                    fwd.data = Some(id);
                }
                by_stream.insert(id, rid.clone());
                rid
            }
            Frame::Data { id, fin, data } => {
                let Some(rid) = by_stream.get(&id).cloned() else {
                    continue;
                };
                if let Some(fwd) = forwards.get_mut(&rid) {
                    if fwd.data == Some(id) {
                        fwd.scanned = fwd.head.len();
                        let room = MAX_HEAD.saturating_sub(fwd.head.len());
                        fwd.head.extend_from_slice(&data[..data.len().min(room)]);
                        fwd.done |= fin;
                    }
                }
                rid
            }
            Frame::Ping(id) => {
                let _ = wire.send(FrameWriter::ping(id)).await;
                continue;
            }
            Frame::RstStream { id } => {
                if let Some(rid) = by_stream.remove(&id) {
                    forwards.remove(&rid);
                }
                continue;
            }
            Frame::GoAway => break,
            Frame::Other => continue,
        };
        // Acts on a connection once both its streams are open.
        let Some(fwd) = forwards.get(&request) else {
            continue;
        };
        let (Some(err_id), Some(data_id)) = (fwd.error, fwd.data) else {
            continue;
        };
        let mut out = Vec::new();
        if portforward::listener(pod, fwd.port).is_none() {
            let msg = format!(
                "error forwarding port {} to pod {uid}, uid : failed to connect to localhost:{} inside namespace \"{uid}\", IPv4: dial tcp4 127.0.0.1:{}: connect: connection refused IPv6 dial tcp6 [::1]:{}: connect: connection refused ",
                fwd.port, fwd.port, fwd.port, fwd.port
            );
            out.extend(FrameWriter::data(err_id, true, msg.as_bytes()));
            out.extend(FrameWriter::data(data_id, true, &[]));
        } else if let Some(end) = portforward::head_end(&fwd.head[fwd.scanned.saturating_sub(3)..])
            .map(|e| e + fwd.scanned.saturating_sub(3))
        {
            let now = rkube_client::now()
                .format("%a, %d %b %Y %H:%M:%S GMT")
                .to_string();
            let answer = portforward::answer(pod, fwd.port, &fwd.head[..end], &now);
            out.extend(FrameWriter::data(data_id, true, &answer));
            out.extend(FrameWriter::data(err_id, true, &[]));
        } else if fwd.done || fwd.head.len() >= MAX_HEAD {
            // Not HTTP, or nothing asked: the connection closes without an answer.
            out.extend(FrameWriter::data(data_id, true, &[]));
            out.extend(FrameWriter::data(err_id, true, &[]));
        } else {
            continue;
        }
        forwards.remove(&request);
        by_stream.retain(|_, r| *r != request);
        if wire.send(out).await.is_err() {
            break;
        }
    }
    let _ = wire.send(FrameWriter::goaway(0)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What an interactive shell writes for `input`, typed into a terminal or piped.
    async fn session(tty: bool, input: &[&[u8]]) -> (String, i32) {
        let view = View {
            hostname: "box".into(),
            ..Default::default()
        };
        let (in_tx, in_rx) = mpsc::channel(16);
        for chunk in input {
            in_tx.send(chunk.to_vec()).await.unwrap();
        }
        drop(in_tx);
        let (out_tx, mut out_rx) = mpsc::channel(256);
        let (code, _) = interactive(
            &view,
            "sh",
            tty,
            Some(in_rx),
            &out_tx,
            &CancellationToken::new(),
        )
        .await;
        drop(out_tx);
        let mut text = Vec::new();
        while let Some((_, b)) = out_rx.recv().await {
            text.extend(b);
        }
        (String::from_utf8_lossy(&text).into_owned(), code)
    }

    #[tokio::test]
    async fn an_interactive_shell_echoes_edits_and_exits() {
        // A terminal: keystrokes echoed, backspace erases, Enter runs, `exit` ends.
        let (out, code) = session(true, &[b"hostnamx", b"\x7fe\r", b"exit 5\r", b"never\r"]).await;
        assert_eq!(out, "/ # hostnamx\x08 \x08e\r\nbox\r\n/ # exit 5\r\n");
        assert_eq!(code, 5);
        // ^C drops the line; ^D on an empty line ends the shell.
        let (out, code) = session(true, &[b"false\r", b"ls\x03", b"\x04"]).await;
        assert!(out.ends_with("ls^C\r\n/ # \r\n"), "{out:?}");
        assert_eq!(code, 1);
        // Piped: no prompt, no echo; the last line may lack its newline.
        let (out, code) = session(false, &[b"echo a\nech", b"o b"]).await;
        assert_eq!((out.as_str(), code), ("a\nb\n", 0));
    }

    #[test]
    fn options_and_shell_containers() {
        let o = opts("command=sh&command=-c&command=echo%20hi&stdin=true&stdout=1&tty=false");
        assert_eq!(o.command, ["sh", "-c", "echo hi"]);
        assert!(o.stdin && o.stdout && !o.stderr && !o.tty);
        let o = opts("input=1&output=1&error=1&tty=1");
        assert!(o.stdin && o.stdout && o.stderr && o.tty);
        assert_eq!(
            container_shell(&json!({"image": "busybox"})).as_deref(),
            Some("sh")
        );
        assert_eq!(
            container_shell(&json!({"image": "x", "args": ["/bin/bash"]})).as_deref(),
            Some("bash")
        );
        assert_eq!(container_shell(&json!({"image": "nginx"})), None);
        assert_eq!(
            container_shell(&json!({"image": "busybox", "command": ["sleep", "1"]})),
            None
        );
        assert_eq!(crlf(b"a\nb"), b"a\r\nb");
        let s: Value = serde_json::from_slice(&status(&Ok(3), &["false".into()])).unwrap();
        assert_eq!(s["reason"], "NonZeroExitCode");
        assert_eq!(s["details"]["causes"][0]["message"], "3");
    }
}
