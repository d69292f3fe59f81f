//! Auditing: `audit.k8s.io/v1` Events for each request the policy selects, at its stages
//! (RequestReceived, ResponseStarted for long-running requests, ResponseComplete), written as
//! JSON lines to `--audit-log-path` by a background writer. The request's `auditID` (the
//! client's `Audit-ID` header, or a new one) comes back as the `Audit-Id` header.

pub mod policy;
pub mod writer;

use std::path::PathBuf;

use rkube_api::authz::{Attributes, UserInfo};
use serde_json::Value;

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

    /// Queues one serialized event.
    pub fn emit(&self, event: Vec<u8>) {
        self.writer.write(event);
    }

    /// Flushes every queued event (clean shutdown).
    pub fn close(&self) {
        self.writer.close();
    }
}

/// What an audit event says about one request; stages add the response. The common part is
/// serialized once; each stage appends its own fields.
/// Audit annotations a handler leaves on its response (as an extension) for the chain to
/// record: `<webhook or policy>/<key>` → value.
#[derive(Clone, Debug, Default)]
pub struct Annotations(pub Vec<(String, String)>);

pub struct Record {
    pub level: Level,
    pub omit: Vec<Stage>,
    /// The event's JSON without its closing brace.
    prefix: String,
    /// `,"requestObject":…` / `,"responseObject":…` when attached.
    objects: String,
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
        if level == Level::None {
            return Record {
                level,
                omit,
                prefix: String::new(),
                objects: String::new(),
            };
        }
        // Written out by hand: one allocation instead of a tree of JSON values.
        use std::fmt::Write as _;
        let q = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into());
        let mut prefix = String::with_capacity(512);
        let _ = write!(
            prefix,
            "{{\"kind\":\"Event\",\"apiVersion\":\"audit.k8s.io/v1\",\"level\":\"{}\",\"auditID\":{},\"requestURI\":{},\"verb\":{},\"user\":{{\"username\":{}",
            level.as_str(),
            q(audit_id),
            q(uri),
            q(&a.verb),
            q(&user.name)
        );
        if !user.uid.is_empty() {
            let _ = write!(prefix, ",\"uid\":{}", q(&user.uid));
        }
        let groups: Vec<String> = user.groups.iter().map(|g| q(g)).collect();
        let _ = write!(
            prefix,
            ",\"groups\":[{}]}},\"sourceIPs\":[{}]",
            groups.join(","),
            q(source_ip)
        );
        if !user_agent.is_empty() {
            let _ = write!(prefix, ",\"userAgent\":{}", q(user_agent));
        }
        if a.resource_request {
            let _ = write!(prefix, ",\"objectRef\":{{\"resource\":{}", q(&a.resource));
            for (k, v) in [
                ("namespace", &a.namespace),
                ("name", &a.name),
                ("apiGroup", &a.api_group),
                ("subresource", &a.subresource),
            ] {
                if !v.is_empty() {
                    let _ = write!(prefix, ",\"{k}\":{}", q(v));
                }
            }
            prefix.push('}');
        }
        let _ = write!(
            prefix,
            ",\"requestReceivedTimestamp\":\"{}\"",
            rkube_api::meta::now_rfc3339_micros()
        );
        Record {
            level,
            omit,
            prefix,
            objects: String::new(),
        }
    }

    pub fn wants(&self, stage: Stage) -> bool {
        self.level > Level::None && !self.omit.contains(&stage)
    }

    /// The event at `stage` (with the response status when there is one), as JSON.
    pub fn at(&self, stage: Stage, code: Option<u16>) -> Vec<u8> {
        let mut out = String::with_capacity(self.prefix.len() + self.objects.len() + 128);
        out.push_str(&self.prefix);
        out.push_str(&self.objects);
        out.push_str(",\"stage\":\"");
        out.push_str(stage.as_str());
        out.push_str("\",\"stageTimestamp\":\"");
        out.push_str(&rkube_api::meta::now_rfc3339_micros());
        out.push('"');
        if let Some(code) = code {
            out.push_str(&format!(
                ",\"responseStatus\":{{\"metadata\":{{}},\"code\":{code}}}"
            ));
        }
        out.push('}');
        out.into_bytes()
    }

    /// Adds the audit annotations admission had for the request (webhooks' and policies').
    pub fn annotate(&mut self, annotations: &[(String, String)]) {
        if annotations.is_empty() || self.level == Level::None {
            return;
        }
        let map: serde_json::Map<String, Value> = annotations
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        if let Ok(text) = serde_json::to_string(&map) {
            self.objects.push_str(&format!(",\"annotations\":{text}"));
        }
    }

    /// Attaches a body as `requestObject` / `responseObject` (JSON bodies only).
    pub fn attach(&mut self, field: &str, body: &[u8], omit_managed_fields: bool) {
        if let Ok(mut v) = serde_json::from_slice::<Value>(body) {
            if omit_managed_fields {
                if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.remove("managedFields");
                }
            }
            if let Ok(text) = serde_json::to_string(&v) {
                self.objects.push_str(&format!(",\"{field}\":{text}"));
            }
        }
    }
}
