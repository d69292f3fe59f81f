//! Auditing: `audit.k8s.io/v1` Events for each request the policy selects, at its stages
//! (RequestReceived, ResponseStarted for long-running requests, ResponseComplete), written as
//! JSON lines to `--audit-log-path` by a background writer. The request's `auditID` (the
//! client's `Audit-ID` header, or a new one) comes back as the `Audit-Id` header.

pub mod policy;
pub mod writer;

use std::path::PathBuf;

use rkube_api::authz::{Attributes, UserInfo};
use serde_json::{json, Map, Value};

pub use policy::{Level, Policy, Stage};

/// `--audit-*` flags.
#[derive(Clone, Debug, Default)]
pub struct AuditConfig {
    pub policy_file: Option<PathBuf>,
    pub log_path: Option<PathBuf>,
    /// MB; 0 = never rotate.
    pub max_size_mb: u64,
    /// 0 = keep all.
    pub max_backup: usize,
}

pub struct Auditor {
    policy: Policy,
    writer: writer::Writer,
}

impl Auditor {
    /// None when auditing is off (no policy or no log path); errors name the bad file.
    pub fn new(cfg: &AuditConfig) -> anyhow::Result<Option<Self>> {
        let (Some(policy_file), Some(log_path)) = (&cfg.policy_file, &cfg.log_path) else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(policy_file)
            .map_err(|e| anyhow::anyhow!("--audit-policy-file {}: {e}", policy_file.display()))?;
        let policy = Policy::parse(&text)
            .map_err(|e| anyhow::anyhow!("--audit-policy-file {}: {e}", policy_file.display()))?;
        let writer = writer::Writer::open(
            log_path,
            writer::Rotation {
                max_size: cfg.max_size_mb * 1024 * 1024,
                max_backup: cfg.max_backup,
            },
        )
        .map_err(|e| anyhow::anyhow!("--audit-log-path {}: {e}", log_path.display()))?;
        Ok(Some(Auditor { policy, writer }))
    }

    pub fn level(&self, user: &UserInfo, a: &Attributes) -> (Level, Vec<Stage>) {
        self.policy.level(user, a)
    }

    pub fn omit_managed_fields(&self) -> bool {
        self.policy.omit_managed_fields
    }

    pub fn emit(&self, event: &Value) {
        self.writer
            .write(serde_json::to_vec(event).unwrap_or_default());
    }

    /// Flushes every queued event (clean shutdown).
    pub fn close(&self) {
        self.writer.close();
    }
}

/// What an audit event says about one request; stages add the response.
pub struct Record {
    pub level: Level,
    pub omit: Vec<Stage>,
    pub event: Map<String, Value>,
}

impl Record {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        level: Level,
        omit: Vec<Stage>,
        audit_id: &str,
        uri: &str,
        user: &UserInfo,
        a: &Attributes,
        source_ip: &str,
        user_agent: &str,
    ) -> Self {
        let mut e = Map::new();
        e.insert("kind".into(), json!("Event"));
        e.insert("apiVersion".into(), json!("audit.k8s.io/v1"));
        e.insert("level".into(), json!(level.as_str()));
        e.insert("auditID".into(), json!(audit_id));
        e.insert("requestURI".into(), json!(uri));
        e.insert("verb".into(), json!(a.verb));
        let mut u = json!({"username": user.name, "groups": user.groups});
        if !user.uid.is_empty() {
            u["uid"] = json!(user.uid);
        }
        e.insert("user".into(), u);
        e.insert("sourceIPs".into(), json!([source_ip]));
        if !user_agent.is_empty() {
            e.insert("userAgent".into(), json!(user_agent));
        }
        if a.resource_request {
            let mut r = json!({"resource": a.resource});
            for (k, v) in [
                ("namespace", &a.namespace),
                ("name", &a.name),
                ("apiGroup", &a.api_group),
                ("subresource", &a.subresource),
            ] {
                if !v.is_empty() {
                    r[k] = json!(v);
                }
            }
            e.insert("objectRef".into(), r);
        }
        let now = rkube_api::meta::now_rfc3339_micros();
        e.insert("requestReceivedTimestamp".into(), json!(now));
        Record {
            level,
            omit,
            event: e,
        }
    }

    pub fn wants(&self, stage: Stage) -> bool {
        self.level > Level::None && !self.omit.contains(&stage)
    }

    /// The event at `stage` (with the response status when there is one).
    pub fn at(&self, stage: Stage, code: Option<u16>) -> Value {
        let mut e = self.event.clone();
        e.insert("stage".into(), json!(stage.as_str()));
        e.insert(
            "stageTimestamp".into(),
            json!(rkube_api::meta::now_rfc3339_micros()),
        );
        if let Some(code) = code {
            e.insert(
                "responseStatus".into(),
                json!({"metadata": {}, "code": code}),
            );
        }
        Value::Object(e)
    }

    /// Attaches a body as `requestObject` / `responseObject` (JSON bodies only).
    pub fn attach(&mut self, field: &str, body: &[u8], omit_managed_fields: bool) {
        if let Ok(mut v) = serde_json::from_slice::<Value>(body) {
            if omit_managed_fields {
                if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.remove("managedFields");
                }
            }
            self.event.insert(field.into(), v);
        }
    }
}
