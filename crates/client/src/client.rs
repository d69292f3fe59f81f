//! The HTTP client: one connection pool, the bearer token, the client-side rate limit, and
//! `Api<K>`, the typed verbs for one resource (in one namespace or across all).

use std::marker::PhantomData;
use std::sync::Arc;

use futures_util::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::ratelimit::TokenBucket;
use crate::watch::{decode_lines, WatchEvent};
use crate::{Config, Error};

/// Everything a typed client needs of a resource type.
pub trait Resource:
    k8s_openapi::Resource
    + k8s_openapi::ListableResource
    + k8s_openapi::Metadata<Ty = ObjectMeta>
    + Serialize
    + DeserializeOwned
    + Clone
    + Send
    + Sync
    + 'static
{
}

impl<K> Resource for K where
    K: k8s_openapi::Resource
        + k8s_openapi::ListableResource
        + k8s_openapi::Metadata<Ty = ObjectMeta>
        + Serialize
        + DeserializeOwned
        + Clone
        + Send
        + Sync
        + 'static
{
}

/// An HTTP client for `cfg`'s server: its CA and client certificate for https, its
/// User-Agent, HTTP/2 or HTTP/1.1 as `cfg.http2` says, a 5 s connect timeout and `timeout`
/// overall (`None` for streams). A bearer token is not in it: requests add `cfg.token`
/// themselves.
pub fn http_client(
    cfg: &Config,
    timeout: Option<std::time::Duration>,
) -> Result<reqwest::Client, Error> {
    let mut b = reqwest::Client::builder()
        .user_agent(cfg.user_agent.clone())
        .tcp_nodelay(true)
        .pool_max_idle_per_host(64)
        .connect_timeout(std::time::Duration::from_secs(5));
    if cfg.http2 {
        if cfg.server.starts_with("http://") {
            b = b.http2_prior_knowledge();
        }
        // PINGs find a connection whose peer vanished: every watch on it would wait for ever.
        b = b
            .http2_keep_alive_interval(std::time::Duration::from_secs(30))
            .http2_keep_alive_timeout(std::time::Duration::from_secs(20))
            .http2_keep_alive_while_idle(true);
    } else {
        b = b.http1_only();
    }
    if let Some(t) = timeout {
        b = b.timeout(t);
    }
    if cfg.server.starts_with("https://") {
        b = b.use_rustls_tls().danger_accept_invalid_certs(cfg.insecure);
        if let Some(ca) = &cfg.ca_pem {
            for cert in reqwest::Certificate::from_pem_bundle(ca)
                .map_err(|e| Error::Config(format!("certificate-authority: {e}")))?
            {
                b = b.add_root_certificate(cert);
            }
        }
        if let Some(id) = &cfg.client_identity_pem {
            b = b.identity(
                reqwest::Identity::from_pem(id)
                    .map_err(|e| Error::Config(format!("client certificate: {e}")))?,
            );
        }
    }
    b.build().map_err(|e| Error::Config(e.to_string()))
}

/// A cheap-to-clone handle on one apiserver.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    /// Watches get no overall timeout; they end by `timeoutSeconds`.
    stream_http: reqwest::Client,
    limiter: Arc<TokenBucket>,
    /// `Config::max_in_flight`'s seats, shared with every copy made from this client.
    in_flight: Option<Arc<tokio::sync::Semaphore>>,
    /// Server, token, observer, and what the connection pools and limiter were built from.
    cfg: Config,
}

impl Client {
    pub fn new(cfg: Config) -> Result<Self, Error> {
        let build = |timeout| http_client(&cfg, timeout);
        Ok(Client {
            inner: Arc::new(Inner {
                http: build(Some(cfg.timeout))?,
                stream_http: build(None)?,
                limiter: Arc::new(TokenBucket::new(cfg.qps, cfg.burst)),
                in_flight: (cfg.max_in_flight > 0)
                    .then(|| Arc::new(tokio::sync::Semaphore::new(cfg.max_in_flight))),
                cfg,
            }),
        })
    }

    /// The same server, identity, rate limit and seats, on connections of its own. Over
    /// HTTP/2 one connection carries at most the server's stream limit at once (1,000 on
    /// rkube's apiserver, as upstream's `--http2-max-streams-per-connection`): a client
    /// with more watches than that spreads them over copies.
    pub fn with_own_connections(&self) -> Result<Client, Error> {
        let cfg = &self.inner.cfg;
        let pools = (
            http_client(cfg, Some(cfg.timeout))?,
            http_client(cfg, None)?,
        );
        Ok(self.copy(self.inner.limiter.clone(), pools))
    }

    /// A copy with `limiter` and the connection pools `(http, stream_http)`; the rest shared.
    fn copy(&self, limiter: Arc<TokenBucket>, pools: (reqwest::Client, reqwest::Client)) -> Client {
        let i = &self.inner;
        Client {
            inner: Arc::new(Inner {
                http: pools.0,
                stream_http: pools.1,
                limiter,
                in_flight: i.in_flight.clone(),
                cfg: i.cfg.clone(),
            }),
        }
    }

    /// The same server, identity and connection pools, with a rate limit of its own (as
    /// upstream gives each controller its own client): one controller's bursts do not hold up
    /// the others'.
    pub fn with_own_rate_limit(&self) -> Client {
        let i = &self.inner;
        let limiter = Arc::new(TokenBucket::new(i.cfg.qps, i.cfg.burst));
        self.copy(limiter, (i.http.clone(), i.stream_http.clone()))
    }

    fn observe(&self, verb: &str, code: Option<u16>, started: std::time::Instant) {
        if let Some(o) = &self.inner.cfg.observer {
            let code = code.map_or_else(|| "<error>".to_string(), |c| c.to_string());
            o(verb, &code, started.elapsed());
        }
    }

    /// A client for `http://host:port` with no limits, for tests and tools.
    pub fn for_server(server: &str) -> Self {
        Self::new(Config::new(server)).expect("plain HTTP client")
    }

    pub fn server(&self) -> &str {
        &self.inner.cfg.server
    }

    fn request(
        &self,
        method: reqwest::Method,
        path_and_query: &str,
        streaming: bool,
    ) -> reqwest::RequestBuilder {
        let http = if streaming {
            &self.inner.stream_http
        } else {
            &self.inner.http
        };
        let mut rb = http.request(method, format!("{}{path_and_query}", self.inner.cfg.server));
        if let Some(t) = &self.inner.cfg.token {
            rb = rb.bearer_auth(t);
        }
        rb
    }

    /// Sends one request (after the rate limit) and returns the body of a 2xx answer.
    pub async fn send(
        &self,
        method: reqwest::Method,
        path_and_query: &str,
        body: Option<(&'static str, Vec<u8>)>,
    ) -> Result<bytes::Bytes, Error> {
        self.send_accepting(method, path_and_query, body, "application/json")
            .await
    }

    /// `send`, asking for `accept` (aggregated discovery, tables, …).
    pub async fn send_accepting(
        &self,
        method: reqwest::Method,
        path_and_query: &str,
        body: Option<(&'static str, Vec<u8>)>,
        accept: &str,
    ) -> Result<bytes::Bytes, Error> {
        // On the heap for the call's length: the exchange's state (reqwest's pending request,
        // the answer being read, the retry's timer) is over a kilobyte, and every task that
        // awaits a request would otherwise carry it inline for its whole life — ten thousand
        // pod workers of the kubelet-agent waiting between status writes, say.
        Box::pin(self.exchange(method, path_and_query, body, accept)).await
    }

    async fn exchange(
        &self,
        method: reqwest::Method,
        path_and_query: &str,
        body: Option<(&'static str, Vec<u8>)>,
        accept: &str,
    ) -> Result<bytes::Bytes, Error> {
        let body = body.map(|(ctype, b)| (ctype, bytes::Bytes::from(b)));
        let verb = method.as_str().to_string();
        // As client-go: an answer that says when to come back (429, or a 5xx with
        // Retry-After) is retried after that long, up to 10 tries in all.
        let mut attempt = 0;
        loop {
            attempt += 1;
            self.inner.limiter.acquire().await;
            // Held until the whole answer is read; given back while a retry waits.
            let seat = match &self.inner.in_flight {
                Some(s) => s.acquire().await.ok(),
                None => None,
            };
            let started = std::time::Instant::now();
            let mut rb = self
                .request(method.clone(), path_and_query, false)
                .header("Accept", accept);
            if let Some((ctype, b)) = &body {
                rb = rb.header("Content-Type", *ctype).body(b.clone());
            }
            let sent = rb.send().await;
            self.observe(
                &verb,
                sent.as_ref().ok().map(|r| r.status().as_u16()),
                started,
            );
            let resp = sent?;
            let code = resp.status().as_u16();
            let idempotent = method == reqwest::Method::GET;
            if let Some(wait) =
                retry_after(code, idempotent, resp.headers()).filter(|_| attempt < MAX_TRIES)
            {
                // Read to the end: the connection goes back to the pool.
                let _ = resp.bytes().await;
                drop(seat);
                tokio::time::sleep(wait).await;
                continue;
            }
            let bytes = resp.bytes().await?;
            return if (200..300).contains(&code) {
                Ok(bytes)
            } else {
                Err(Error::from_reply(code, &bytes))
            };
        }
    }

    /// Sends a request and decodes a JSON answer.
    pub async fn send_json<T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path_and_query: &str,
        body: Option<(&'static str, Vec<u8>)>,
    ) -> Result<T, Error> {
        let bytes = self.send(method, path_and_query, body).await?;
        serde_json::from_slice(&bytes).map_err(|e| Error::Decode(format!("{path_and_query}: {e}")))
    }

    /// Opens a watch and yields its events; the stream ends when the server ends it.
    pub async fn watch_raw<K: DeserializeOwned + Send + 'static>(
        &self,
        path_and_query: &str,
    ) -> Result<impl Stream<Item = Result<WatchEvent<K>, Error>> + Send + 'static, Error> {
        self.inner.limiter.acquire().await;
        let started = std::time::Instant::now();
        // Boxed, as in `send_accepting`: the reflector's task outlives the call.
        let sent = Box::pin(
            self.request(reqwest::Method::GET, path_and_query, true)
                .header("Accept", "application/json")
                .send(),
        )
        .await;
        // A watch counts once its response starts, as upstream's client measures it.
        self.observe(
            "WATCH",
            sent.as_ref().ok().map(|r| r.status().as_u16()),
            started,
        );
        let resp = sent?;
        let code = resp.status().as_u16();
        if !(200..300).contains(&code) {
            let bytes = resp.bytes().await.unwrap_or_default();
            return Err(Error::from_reply(code, &bytes));
        }
        Ok(decode_lines(
            resp.bytes_stream().map(|r| r.map_err(Error::from)),
        ))
    }
}

/// Tries of a request the server asks to be retried (client-go's `maxRetries` + 1).
const MAX_TRIES: u32 = 10;

/// How long to wait before trying again, when the answer says (client-go's `checkWait`): a
/// `Retry-After` of whole seconds, clamped to 1–10 s, on a 429 (not served, whatever the method)
/// or, for a read, a 5xx (a write answered 5xx may have been stored: sending it again could
/// create a second object).
pub fn retry_after(
    code: u16,
    idempotent: bool,
    headers: &reqwest::header::HeaderMap,
) -> Option<std::time::Duration> {
    if code != 429 && !(idempotent && code >= 500) {
        return None;
    }
    let secs: u64 = headers
        .get("retry-after")?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(std::time::Duration::from_secs(secs.clamp(1, 10)))
}

/// Options for list and watch, in the query's names.
#[derive(Clone, Debug, Default)]
pub struct ListParams {
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    pub limit: Option<u32>,
    pub continue_token: Option<String>,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
    pub timeout_seconds: Option<u32>,
    pub allow_watch_bookmarks: bool,
    pub send_initial_events: bool,
}

impl ListParams {
    pub fn labels(mut self, s: &str) -> Self {
        self.label_selector = Some(s.to_string());
        self
    }

    pub fn fields(mut self, s: &str) -> Self {
        self.field_selector = Some(s.to_string());
        self
    }

    fn query(&self, watch: bool) -> String {
        let mut q: Vec<String> = Vec::new();
        let mut push = |k: &str, v: &str| q.push(format!("{k}={}", encode(v)));
        if watch {
            push("watch", "true");
        }
        if let Some(v) = &self.label_selector {
            push("labelSelector", v);
        }
        if let Some(v) = &self.field_selector {
            push("fieldSelector", v);
        }
        if let Some(v) = self.limit {
            push("limit", &v.to_string());
        }
        if let Some(v) = &self.continue_token {
            push("continue", v);
        }
        if let Some(v) = &self.resource_version {
            push("resourceVersion", v);
        }
        if let Some(v) = &self.resource_version_match {
            push("resourceVersionMatch", v);
        }
        if let Some(v) = self.timeout_seconds {
            push("timeoutSeconds", &v.to_string());
        }
        if watch && self.allow_watch_bookmarks {
            push("allowWatchBookmarks", "true");
        }
        if watch && self.send_initial_events {
            push("sendInitialEvents", "true");
        }
        if q.is_empty() {
            String::new()
        } else {
            format!("?{}", q.join("&"))
        }
    }
}

/// Percent-encodes a query value.
pub fn encode(v: &str) -> String {
    rkube_api::options::percent_encode(v)
}

/// How a patch body is to be read.
#[derive(Clone, Debug)]
pub enum Patch {
    Merge(Value),
    Strategic(Value),
    Json(Value),
}

impl Patch {
    fn body(&self) -> (&'static str, Vec<u8>) {
        let (ct, v) = match self {
            Patch::Merge(v) => ("application/merge-patch+json", v),
            Patch::Strategic(v) => ("application/strategic-merge-patch+json", v),
            Patch::Json(v) => ("application/json-patch+json", v),
        };
        (ct, serde_json::to_vec(v).expect("JSON value"))
    }
}

/// `DeleteOptions` as the body of a DELETE.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeleteParams {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grace_period_seconds: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub propagation_policy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preconditions: Option<Preconditions>,
}

#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Preconditions {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
}

impl DeleteParams {
    pub fn with_uid(uid: &str) -> Self {
        DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_string()),
                resource_version: None,
            }),
            ..Default::default()
        }
    }

    pub fn propagation(mut self, p: &str) -> Self {
        self.propagation_policy = Some(p.to_string());
        self
    }

    pub fn grace(mut self, secs: i64) -> Self {
        self.grace_period_seconds = Some(secs);
        self
    }
}

/// A JSON request body.
fn json_body(v: &impl Serialize) -> Result<(&'static str, Vec<u8>), Error> {
    serde_json::to_vec(v)
        .map(|b| ("application/json", b))
        .map_err(|e| Error::Decode(e.to_string()))
}

/// The typed verbs for resource `K`, in one namespace or (for cluster-scoped resources and
/// cross-namespace lists) across all.
pub struct Api<K> {
    client: Client,
    namespace: Option<String>,
    /// A resource known at run time (discovered), overriding `K`'s own path.
    dynamic: Option<Arc<crate::dynamic::ApiResource>>,
    _k: PhantomData<fn() -> K>,
}

impl<K> Clone for Api<K> {
    fn clone(&self) -> Self {
        Api {
            client: self.client.clone(),
            namespace: self.namespace.clone(),
            dynamic: self.dynamic.clone(),
            _k: PhantomData,
        }
    }
}

/// A list answer: the items and the list's metadata (the list's kind is not checked, so one
/// type reads any resource's list, e.g. as `PartialObjectMeta`).
#[derive(Debug, serde::Deserialize)]
pub struct ObjectList<K> {
    #[serde(default)]
    pub metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta,
    #[serde(default = "Vec::new")]
    pub items: Vec<K>,
}

impl<K: Resource> Api<K> {
    pub fn namespaced(client: &Client, namespace: &str) -> Self {
        Api {
            client: client.clone(),
            namespace: Some(namespace.to_string()),
            dynamic: None,
            _k: PhantomData,
        }
    }

    pub fn all(client: &Client) -> Self {
        Api {
            client: client.clone(),
            namespace: None,
            dynamic: None,
            _k: PhantomData,
        }
    }

    /// The verbs for a resource found by discovery, across all namespaces, its objects read
    /// as `K` (typically `PartialObjectMeta`).
    pub fn dynamic(client: &Client, resource: crate::dynamic::ApiResource) -> Self {
        Api {
            client: client.clone(),
            namespace: None,
            dynamic: Some(Arc::new(resource)),
            _k: PhantomData,
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// `/api/v1/namespaces/ns/pods[/name[/sub]]`.
    pub fn path(&self, name: Option<&str>, sub: Option<&str>) -> String {
        let (group, version, plural) = match &self.dynamic {
            Some(r) => (r.group.as_str(), r.version.as_str(), r.plural.as_str()),
            None => (K::GROUP, K::VERSION, K::URL_PATH_SEGMENT),
        };
        let mut p = crate::dynamic::group_version_path(group, version);
        if let Some(ns) = &self.namespace {
            p.push_str("/namespaces/");
            p.push_str(ns);
        }
        p.push('/');
        p.push_str(plural);
        if let Some(n) = name {
            p.push('/');
            p.push_str(n);
        }
        if let Some(s) = sub {
            p.push('/');
            p.push_str(s);
        }
        p
    }

    /// The namespace-qualified API for an object's own namespace (namespaced kinds).
    pub fn in_namespace_of(client: &Client, obj: &K) -> Self {
        match obj.metadata().namespace.as_deref() {
            Some(ns) => Self::namespaced(client, ns),
            None => Self::all(client),
        }
    }

    /// One request at `path(name, sub)`, its answer decoded.
    async fn call<T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        name: Option<&str>,
        sub: Option<&str>,
        body: Option<(&'static str, Vec<u8>)>,
    ) -> Result<T, Error> {
        self.client
            .send_json(method, &self.path(name, sub), body)
            .await
    }

    pub async fn get(&self, name: &str) -> Result<K, Error> {
        self.call(reqwest::Method::GET, Some(name), None, None)
            .await
    }

    /// `get`, with 404 as `None`.
    pub async fn get_opt(&self, name: &str) -> Result<Option<K>, Error> {
        match self.get(name).await {
            Ok(o) => Ok(Some(o)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub async fn list(&self, lp: &ListParams) -> Result<ObjectList<K>, Error> {
        let path = format!("{}{}", self.path(None, None), lp.query(false));
        self.client
            .send_json(reqwest::Method::GET, &path, None)
            .await
    }

    pub async fn watch(
        &self,
        lp: &ListParams,
    ) -> Result<impl Stream<Item = Result<WatchEvent<K>, Error>> + Send + 'static, Error> {
        let path = format!("{}{}", self.path(None, None), lp.query(true));
        self.client.watch_raw(&path).await
    }

    pub async fn create(&self, obj: &K) -> Result<K, Error> {
        self.call(reqwest::Method::POST, None, None, Some(json_body(obj)?))
            .await
    }

    pub async fn replace(&self, name: &str, obj: &K) -> Result<K, Error> {
        self.call(
            reqwest::Method::PUT,
            Some(name),
            None,
            Some(json_body(obj)?),
        )
        .await
    }

    pub async fn replace_status(&self, name: &str, obj: &K) -> Result<K, Error> {
        self.call(
            reqwest::Method::PUT,
            Some(name),
            Some("status"),
            Some(json_body(obj)?),
        )
        .await
    }

    pub async fn patch(&self, name: &str, patch: &Patch) -> Result<K, Error> {
        self.call(reqwest::Method::PATCH, Some(name), None, Some(patch.body()))
            .await
    }

    pub async fn patch_status(&self, name: &str, patch: &Patch) -> Result<K, Error> {
        self.call(
            reqwest::Method::PATCH,
            Some(name),
            Some("status"),
            Some(patch.body()),
        )
        .await
    }

    /// Deletes; the answer (the object being deleted, or a Status) is returned as JSON.
    pub async fn delete(&self, name: &str, dp: &DeleteParams) -> Result<Value, Error> {
        self.call(
            reqwest::Method::DELETE,
            Some(name),
            None,
            Some(json_body(dp)?),
        )
        .await
    }

    /// POST to a subresource (`binding`, `eviction`).
    pub async fn create_subresource(
        &self,
        name: &str,
        sub: &str,
        body: &Value,
    ) -> Result<Value, Error> {
        self.call(
            reqwest::Method::POST,
            Some(name),
            Some(sub),
            Some(json_body(body)?),
        )
        .await
    }

    /// GET a subresource (`scale`).
    pub async fn get_subresource(&self, name: &str, sub: &str) -> Result<Value, Error> {
        self.call(reqwest::Method::GET, Some(name), Some(sub), None)
            .await
    }

    /// PUT a subresource (`scale`).
    pub async fn replace_subresource(
        &self,
        name: &str,
        sub: &str,
        body: &Value,
    ) -> Result<Value, Error> {
        self.call(
            reqwest::Method::PUT,
            Some(name),
            Some(sub),
            Some(json_body(body)?),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{Node, Pod};

    #[test]
    fn paths_follow_the_api_layout() {
        let c = Client::for_server("http://127.0.0.1:1");
        assert_eq!(
            Api::<Pod>::namespaced(&c, "ns").path(Some("p"), Some("status")),
            "/api/v1/namespaces/ns/pods/p/status"
        );
        assert_eq!(
            Api::<Deployment>::all(&c).path(None, None),
            "/apis/apps/v1/deployments"
        );
        assert_eq!(
            Api::<Node>::all(&c).path(Some("n1"), None),
            "/api/v1/nodes/n1"
        );
    }

    /// A server answering each connection with the next canned response, counting requests.
    async fn canned(answers: Vec<&'static str>) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = count.clone();
        tokio::spawn(async move {
            for answer in answers {
                let Ok((mut conn, _)) = listener.accept().await else {
                    return;
                };
                let _ = crate::testserver::read_request(&mut conn).await;
                seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let _ = conn.write_all(answer.as_bytes()).await;
            }
        });
        (base, count)
    }

    #[tokio::test]
    async fn a_429_with_retry_after_is_tried_again() {
        let busy = "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}";
        let created = "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 11\r\nConnection: close\r\n\r\n{\"ok\":true}";
        let (base, count) = canned(vec![busy, created]).await;
        let c = Client::for_server(&base);
        let body = Some(("application/json", b"{\"kind\":\"Pod\"}".to_vec()));
        let got = c
            .send(reqwest::Method::POST, "/api/v1/namespaces/a/pods", body)
            .await
            .unwrap();
        assert_eq!(&got[..], b"{\"ok\":true}");
        assert_eq!(
            count.load(std::sync::atomic::Ordering::SeqCst),
            2,
            "one refusal, one retry with the body"
        );

        // Without Retry-After the refusal is the answer.
        let bare = "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}";
        let (base, count) = canned(vec![bare, created]).await;
        let e = Client::for_server(&base)
            .send(reqwest::Method::GET, "/api/v1/pods", None)
            .await
            .unwrap_err();
        assert_eq!(e.code(), Some(429));
        assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 1);
        let mut h = reqwest::header::HeaderMap::new();
        assert_eq!(retry_after(503, true, &h), None, "no Retry-After");
        h.insert("retry-after", "2".parse().unwrap());
        assert_eq!(
            retry_after(503, true, &h),
            Some(std::time::Duration::from_secs(2))
        );
        assert_eq!(
            retry_after(504, false, &h),
            None,
            "a write that may have been stored"
        );
        assert_eq!(
            retry_after(429, false, &h),
            Some(std::time::Duration::from_secs(2))
        );
    }

    #[test]
    fn query_is_encoded() {
        let lp = ListParams {
            allow_watch_bookmarks: true,
            resource_version: Some("12".into()),
            ..Default::default()
        }
        .fields("spec.nodeName=n 1")
        .labels("app in (a,b)");
        assert_eq!(
            lp.query(true),
            "?watch=true&labelSelector=app%20in%20%28a%2Cb%29&fieldSelector=spec.nodeName%3Dn%201&resourceVersion=12&allowWatchBookmarks=true"
        );
        assert_eq!(ListParams::default().query(false), "");
    }

    /// A client capped at two requests in flight never has a third at the server: the server
    /// holds each answer until a third request arrives (or half a second passes).
    #[tokio::test]
    async fn max_in_flight_caps_requests_at_the_server() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (open, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (o, m) = (open.clone(), most.clone());
        tokio::spawn(async move {
            for _ in 0..8 {
                let Ok((mut conn, _)) = listener.accept().await else {
                    return;
                };
                let (open, most) = (o.clone(), m.clone());
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    let mut got = Vec::new();
                    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                    }
                    let now = open.fetch_add(1, SeqCst) + 1;
                    most.fetch_max(now, SeqCst);
                    let deadline =
                        tokio::time::Instant::now() + std::time::Duration::from_millis(500);
                    while open.load(SeqCst) < 3 && tokio::time::Instant::now() < deadline {
                        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                    }
                    open.fetch_sub(1, SeqCst);
                    let _ = conn
                        .write_all(
                            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
                        )
                        .await;
                });
            }
        });
        let mut cfg = Config::new(&base);
        cfg.max_in_flight = 2;
        let c = Client::new(cfg).unwrap();
        let own = c.with_own_rate_limit();
        let get = |c: Client| async move { c.send(reqwest::Method::GET, "/api", None).await };
        let all =
            futures_util::future::join_all([c.clone(), c.clone(), own.clone(), own].map(get)).await;
        assert!(all.iter().all(|r| r.is_ok()), "{all:?}");
        assert_eq!(most.load(SeqCst), 2, "at most two at the server at once");
    }
}
