//! `rkube replay NAME FILE [--speed N]`: a recording (see `record`) played into a cluster.
//! Changes are applied in order, `at / speed` seconds after the start (`--speed 0`: no
//! waiting). `ADDED` and `MODIFIED` create the object or replace the one there (server fields
//! — uid, resourceVersion, creationTimestamp, generation — left to the cluster), then write
//! its status through the `status` subresource where there is one; `DELETED` deletes it
//! (pods at once, as the recording saw them gone). Owner references are re-linked: each
//! recorded uid maps to the uid the object has in this cluster, and a reference to an owner
//! not (yet) replayed is left out rather than dangle. A change that fails is reported and
//! the replay goes on.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rkube_client::dynamic::ApiResource;
use rkube_client::{Client, Method};
use serde_json::{json, Value};

use super::record::{self, Change};
use super::steps::Steps;

/// The most changes a recording may hold.
const MAX_CHANGES: usize = 1_000_000;
/// Failures in a row after which the replay stops (the cluster is gone, or the file is not
/// meant for it).
const GIVE_UP_AFTER: u64 = 20;
/// Tries of a replace that meets a conflict (a controller of this cluster wrote meanwhile).
const CONFLICT_TRIES: usize = 5;

/// What a replay did.
#[derive(Debug, Default, PartialEq)]
pub struct Replayed {
    pub applied: u64,
    pub failed: u64,
}

pub async fn replay(
    name: &str,
    file: &Path,
    speed: f64,
    steps: &Steps,
) -> anyhow::Result<Replayed> {
    anyhow::ensure!(
        speed >= 0.0 && speed.is_finite(),
        "--speed {speed}: 0 (no waiting) or more"
    );
    let changes = record::read(file, MAX_CHANGES)?;
    let client = record::admin(name)?;
    let served = rkube_client::dynamic::discover(&client)
        .await
        .context("discovery")?;
    let step = steps.start(format!(
        "{} changes from {} replayed into {name:?}{}",
        changes.len(),
        file.display(),
        if speed > 0.0 {
            format!(" at {speed}× speed")
        } else {
            String::new()
        }
    ));
    let mut uids: HashMap<String, String> = HashMap::new();
    let mut done = Replayed::default();
    let began = Instant::now();
    let mut in_a_row = 0;
    for c in &changes {
        if speed > 0.0 && c.at > 0.0 {
            // `at` is at most a year (checked on reading); a tiny speed is capped likewise.
            let wait = Duration::try_from_secs_f64(c.at / speed).unwrap_or(Duration::MAX);
            let due = began + wait.min(Duration::from_secs(366 * 86400));
            tokio::time::sleep_until(due.into()).await;
        }
        match apply(&client, &served, &mut uids, c).await {
            Ok(()) => {
                done.applied += 1;
                in_a_row = 0;
            }
            Err(e) => {
                done.failed += 1;
                in_a_row += 1;
                if in_a_row >= GIVE_UP_AFTER {
                    step.fail();
                    bail!("{GIVE_UP_AFTER} changes in a row failed (the last: {e:#}); {} applied before", done.applied);
                }
                let m = &c.object["metadata"];
                eprintln!(
                    "replay: {} {} {}{}: {e:#}",
                    c.kind,
                    c.object["kind"].as_str().unwrap_or("?"),
                    m["namespace"]
                        .as_str()
                        .map(|n| format!("{n}/"))
                        .unwrap_or_default(),
                    m["name"].as_str().unwrap_or("?"),
                );
            }
        }
    }
    step.done_with(&format!("{} applied, {} failed", done.applied, done.failed));
    Ok(done)
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    path.iter()
        .fold(v, |v, k| &v[*k])
        .as_str()
        .unwrap_or_default()
}

async fn apply(
    client: &Client,
    served: &[ApiResource],
    uids: &mut HashMap<String, String>,
    c: &Change,
) -> anyhow::Result<()> {
    let obj = &c.object;
    let (api_version, kind) = (str_at(obj, &["apiVersion"]), str_at(obj, &["kind"]));
    let r = served
        .iter()
        .find(|r| r.api_version() == api_version && r.kind == kind)
        .with_context(|| format!("the cluster serves no {kind} in {api_version}"))?;
    let (ns, name) = (
        str_at(obj, &["metadata", "namespace"]),
        str_at(obj, &["metadata", "name"]),
    );
    anyhow::ensure!(!name.is_empty(), "no metadata.name");
    let path = r.object_path(ns, name);
    if c.kind == "DELETED" {
        let opts = if kind == "Pod" {
            json!({"gracePeriodSeconds": 0})
        } else {
            json!({})
        };
        return match client
            .send(
                Method::DELETE,
                &path,
                Some(("application/json", opts.to_string().into_bytes())),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e.into()),
        };
    }
    let mut body = clean(obj, uids);
    let mut tries = 0;
    let now: Value = loop {
        tries += 1;
        let result = match client.send_json::<Value>(Method::GET, &path, None).await {
            Ok(existing) => {
                body["metadata"]["uid"] = existing["metadata"]["uid"].clone();
                body["metadata"]["resourceVersion"] =
                    existing["metadata"]["resourceVersion"].clone();
                client
                    .send_json::<Value>(Method::PUT, &path, Some(json_body(&body)))
                    .await
            }
            Err(e) if e.is_not_found() => {
                strip_server_fields(&mut body);
                let created = client
                    .send_json::<Value>(
                        Method::POST,
                        &r.collection_path(ns),
                        Some(json_body(&body)),
                    )
                    .await;
                match created {
                    // A Service's recorded cluster IP may be taken here: let this cluster pick.
                    Err(e)
                        if e.code() == Some(422)
                            && kind == "Service"
                            && body["spec"]["clusterIP"].is_string() =>
                    {
                        if let Some(spec) = body["spec"].as_object_mut() {
                            spec.remove("clusterIP");
                            spec.remove("clusterIPs");
                        }
                        continue;
                    }
                    other => other,
                }
            }
            Err(e) => Err(e),
        };
        match result {
            Ok(v) => break v,
            Err(e) if (e.is_conflict() || e.is_already_exists()) && tries < CONFLICT_TRIES => {
                continue
            }
            Err(e) => return Err(e.into()),
        }
    };
    let old_uid = str_at(obj, &["metadata", "uid"]);
    let new_uid = str_at(&now, &["metadata", "uid"]);
    if !old_uid.is_empty() && !new_uid.is_empty() {
        uids.insert(old_uid.to_string(), new_uid.to_string());
    }
    if let Some(status) = obj
        .get("status")
        .filter(|s| s.as_object().is_some_and(|m| !m.is_empty()))
    {
        let patch = json!({ "status": status });
        match client
            .send(
                Method::PATCH,
                &format!("{path}/status"),
                Some((
                    "application/merge-patch+json",
                    patch.to_string().into_bytes(),
                )),
            )
            .await
        {
            Ok(_) => {}
            // Kinds without a status subresource.
            Err(e) if matches!(e.code(), Some(404) | Some(405)) => {}
            Err(e) => return Err(anyhow::Error::from(e).context("status")),
        }
    }
    Ok(())
}

fn json_body(v: &Value) -> (&'static str, Vec<u8>) {
    ("application/json", v.to_string().into_bytes())
}

/// The object to write: without its status (written through the subresource after) and the
/// fields the server sets, owner references mapped to this cluster's uids.
fn clean(obj: &Value, uids: &HashMap<String, String>) -> Value {
    let mut body = obj.clone();
    if let Some(m) = body.as_object_mut() {
        m.remove("status");
    }
    strip_server_fields(&mut body);
    if let Some(meta) = body["metadata"].as_object_mut() {
        if let Some(refs) = meta
            .get_mut("ownerReferences")
            .and_then(Value::as_array_mut)
        {
            refs.retain_mut(|r| match uids.get(r["uid"].as_str().unwrap_or_default()) {
                Some(new) => {
                    r["uid"] = new.clone().into();
                    true
                }
                None => false,
            });
            if refs.is_empty() {
                meta.remove("ownerReferences");
            }
        }
    }
    body
}

fn strip_server_fields(body: &mut Value) {
    if let Some(meta) = body["metadata"].as_object_mut() {
        for k in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "generation",
            "managedFields",
            "selfLink",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ] {
            meta.remove(k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_references_follow_the_replayed_owners() {
        let uids = HashMap::from([("old-rs".to_string(), "new-rs".to_string())]);
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "uid": "old-p", "resourceVersion": "9", "generation": 1,
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "ownerReferences": [
                    {"kind": "ReplicaSet", "name": "rs", "uid": "old-rs", "controller": true},
                    {"kind": "Thing", "name": "gone", "uid": "never-replayed"}
                ]},
            "spec": {"nodeName": "n"},
            "status": {"phase": "Running"}
        });
        let body = clean(&pod, &uids);
        assert_eq!(
            body,
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "ownerReferences": [
                    {"kind": "ReplicaSet", "name": "rs", "uid": "new-rs", "controller": true}
                ]},
                "spec": {"nodeName": "n"}
            })
        );
        let orphan = clean(
            &json!({"metadata": {"ownerReferences": [{"uid": "x"}]}}),
            &uids,
        );
        assert_eq!(orphan, json!({"metadata": {}}));
    }
}
