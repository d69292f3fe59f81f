//! `rkube record NAME FILE`: every change to a cluster's objects as a YAML stream, until
//! Ctrl-C (or SIGTERM). Each document is a [`Change`]: `at` (seconds since the recording
//! began), `type` (`ADDED`, `MODIFIED`, `DELETED`) and the `object` without its
//! `managedFields`. The objects present at the start come first as `ADDED` at 0, resource by
//! resource (namespaces and cluster-scoped kinds before the kinds that live in them, owners
//! before what they own); then each resource's watch (bookmarks on, resumed from its last
//! resourceVersion; re-listed after a 410, objects gone meanwhile recorded as `DELETED`).
//! Every document is flushed as it is written, so a killed recording is a valid prefix.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures_util::StreamExt;
use rkube_client::dynamic::ApiResource;
use rkube_client::watch::WatchEvent;
use rkube_client::{Client, Method};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc;

use super::home::Home;
use super::steps::Steps;

/// What is recorded unless `--resources` says otherwise (kwokctl's default set, without
/// Events and Leases, which change all the time).
pub const DEFAULT_RESOURCES: &[&str] = &[
    "namespaces",
    "nodes",
    "priorityclasses.scheduling.k8s.io",
    "storageclasses.storage.k8s.io",
    "persistentvolumes",
    "clusterroles.rbac.authorization.k8s.io",
    "clusterrolebindings.rbac.authorization.k8s.io",
    "serviceaccounts",
    "configmaps",
    "secrets",
    "limitranges",
    "roles.rbac.authorization.k8s.io",
    "rolebindings.rbac.authorization.k8s.io",
    "persistentvolumeclaims",
    "services",
    "deployments.apps",
    "statefulsets.apps",
    "daemonsets.apps",
    "cronjobs.batch",
    "jobs.batch",
    "replicasets.apps",
    "pods",
];

/// One recorded change.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Change {
    /// Seconds since the recording began.
    pub at: f64,
    #[serde(rename = "type")]
    pub kind: String,
    pub object: Value,
}

/// The client of cluster `name`'s admin.
pub fn admin(name: &str) -> anyhow::Result<Client> {
    let home = Home::of(name)?;
    home.load()?;
    let mut cfg = rkube_client::Config::from_kubeconfig(&home.kubeconfig())?;
    cfg.user_agent = "rkube-cli".into();
    Ok(Client::new(cfg)?)
}

/// `plural[.group]` names resolved against what the server serves (an unknown name is an
/// error naming it).
pub async fn resolve(client: &Client, names: &[String]) -> anyhow::Result<Vec<ApiResource>> {
    let served = rkube_client::dynamic::discover(client)
        .await
        .context("discovery")?;
    names
        .iter()
        .map(|n| {
            let (plural, group) = n.split_once('.').unwrap_or((n, ""));
            served
                .iter()
                .find(|r| r.plural == plural && r.group == group)
                .cloned()
                .with_context(|| format!("the cluster serves no resource {n:?}"))
        })
        .collect()
}

/// The object as recorded: without `managedFields` (bookkeeping, and most of the bytes).
fn trim(mut obj: Value) -> Value {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    obj
}

fn key_of(obj: &Value) -> (String, String) {
    let m = &obj["metadata"];
    let s = |k: &str| m[k].as_str().unwrap_or_default().to_string();
    (s("namespace"), s("name"))
}

/// Lists `r` (every page); its items with the `apiVersion` and `kind` lists leave out, and
/// the list's resourceVersion.
async fn list(client: &Client, r: &ApiResource) -> anyhow::Result<(Vec<Value>, String)> {
    let mut items = Vec::new();
    let mut cont = String::new();
    loop {
        let mut path = format!("{}?limit=500", r.collection_path(""));
        if !cont.is_empty() {
            path.push_str("&continue=");
            path.push_str(&rkube_client::client::encode(&cont));
        }
        let page: Value = client.send_json(Method::GET, &path, None).await?;
        for mut item in page["items"].as_array().cloned().unwrap_or_default() {
            item["apiVersion"] = r.api_version().into();
            item["kind"] = r.kind.clone().into();
            items.push(trim(item));
        }
        let meta = &page["metadata"];
        cont = meta["continue"].as_str().unwrap_or_default().to_string();
        if cont.is_empty() {
            let rv = meta["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            return Ok((items, rv));
        }
    }
}

/// Watches `r` from `rv` (its list's) until `tx` closes, sending every change; `known` holds
/// the objects listed (for a re-list after a 410).
async fn follow(
    client: Client,
    r: ApiResource,
    mut rv: String,
    mut known: BTreeMap<(String, String), Value>,
    began: Instant,
    tx: mpsc::Sender<Change>,
) -> anyhow::Result<()> {
    let at = || (began.elapsed().as_secs_f64() * 1000.0).round() / 1000.0;
    loop {
        let path = format!(
            "{}?watch=true&allowWatchBookmarks=true&timeoutSeconds=300&resourceVersion={rv}",
            r.collection_path("")
        );
        let stream = match client.watch_raw::<Value>(&path).await {
            Ok(s) => s,
            Err(e) if e.is_gone() => {
                match relisted(&client, &r, &mut known, &tx, at()).await {
                    Some(v) => rv = v,
                    None => return Ok(()),
                }
                continue;
            }
            Err(e) => {
                if tx.is_closed() {
                    return Ok(());
                }
                eprintln!("record: watching {} failed ({e}); retrying", r.plural);
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            let (kind, obj) = match ev {
                Ok(WatchEvent::Added(o)) => ("ADDED", o),
                Ok(WatchEvent::Modified(o)) => ("MODIFIED", o),
                Ok(WatchEvent::Deleted(o)) => ("DELETED", o),
                Ok(WatchEvent::Bookmark {
                    resource_version, ..
                }) => {
                    rv = resource_version;
                    continue;
                }
                Ok(WatchEvent::Error(status)) if status.code == 410 => {
                    match relisted(&client, &r, &mut known, &tx, at()).await {
                        Some(v) => rv = v,
                        None => return Ok(()),
                    }
                    break;
                }
                Ok(WatchEvent::Error(_)) | Err(_) => break,
            };
            let mut obj = trim(obj);
            obj["apiVersion"] = r.api_version().into();
            obj["kind"] = r.kind.clone().into();
            if let Some(v) = obj["metadata"]["resourceVersion"].as_str() {
                rv = v.to_string();
            }
            if kind == "DELETED" {
                known.remove(&key_of(&obj));
            } else {
                known.insert(key_of(&obj), obj.clone());
            }
            if tx
                .send(Change {
                    at: at(),
                    kind: kind.into(),
                    object: obj,
                })
                .await
                .is_err()
            {
                return Ok(());
            }
        }
        if tx.is_closed() {
            return Ok(());
        }
        // The stream ended (its timeout, an error event, a dropped connection): a short pause
        // before the next watch, so a failing one cannot spin.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// [`relist`] until it succeeds (a second apart, the failures reported); `None` once the
/// recording has stopped.
async fn relisted(
    client: &Client,
    r: &ApiResource,
    known: &mut BTreeMap<(String, String), Value>,
    tx: &mpsc::Sender<Change>,
    at: f64,
) -> Option<String> {
    loop {
        match relist(client, r, known, tx, at).await {
            Ok(rv) => return Some(rv),
            Err(_) if tx.is_closed() => return None,
            Err(e) => {
                eprintln!("record: listing {} failed ({e:#}); retrying", r.plural);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// After a 410: lists again, records what changed meanwhile (`MODIFIED` for what exists,
/// `DELETED` for what is gone), and returns the new resourceVersion.
async fn relist(
    client: &Client,
    r: &ApiResource,
    known: &mut BTreeMap<(String, String), Value>,
    tx: &mpsc::Sender<Change>,
    at: f64,
) -> anyhow::Result<String> {
    let (items, rv) = list(client, r).await?;
    let mut now: BTreeMap<(String, String), Value> = BTreeMap::new();
    for obj in items {
        now.insert(key_of(&obj), obj);
    }
    for (k, old) in std::mem::take(known) {
        if !now.contains_key(&k) {
            let _ = tx
                .send(Change {
                    at,
                    kind: "DELETED".into(),
                    object: old,
                })
                .await;
        }
    }
    for obj in now.values() {
        let _ = tx
            .send(Change {
                at,
                kind: "MODIFIED".into(),
                object: obj.clone(),
            })
            .await;
    }
    *known = now;
    Ok(rv)
}

/// Records cluster `name` into `file` until Ctrl-C or SIGTERM; returns the changes written.
pub async fn record(
    name: &str,
    file: &Path,
    resources: &[String],
    steps: &Steps,
) -> anyhow::Result<u64> {
    let client = admin(name)?;
    let resources = resolve(&client, resources).await?;
    let mut out = std::io::BufWriter::new(crate::cluster::create_private(file)?);
    let began = Instant::now();
    let mut written = 0u64;
    // The objects there now first, resource by resource in the order given (namespaces
    // before what lives in them, owners before what they own), then every watch at once.
    let mut listed = Vec::new();
    for r in resources {
        let (items, rv) = list(&client, &r).await?;
        let mut known = BTreeMap::new();
        for obj in items {
            known.insert(key_of(&obj), obj.clone());
            write_change(
                &mut out,
                &Change {
                    at: 0.0,
                    kind: "ADDED".into(),
                    object: obj,
                },
            )?;
            written += 1;
        }
        listed.push((r, rv, known));
    }
    let (tx, mut rx) = mpsc::channel::<Change>(1024);
    let tasks: Vec<_> = listed
        .into_iter()
        .map(|(r, rv, known)| tokio::spawn(follow(client.clone(), r, rv, known, began, tx.clone())))
        .collect();
    drop(tx);
    steps.say(&format!(
        "Recording cluster {name:?} into {} (Ctrl-C stops) …",
        file.display()
    ));
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut stop = std::pin::pin!(async {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    });
    loop {
        let change = tokio::select! {
            c = rx.recv() => match c {
                Some(c) => c,
                None => break,
            },
            _ = &mut stop => break,
        };
        write_change(&mut out, &change)?;
        written += 1;
    }
    for t in tasks {
        t.abort();
    }
    // What the watches had sent before they stopped is written too.
    while let Ok(change) = rx.try_recv() {
        write_change(&mut out, &change)?;
        written += 1;
    }
    out.flush()?;
    steps.say(&format!(
        "Recorded {written} changes into {}",
        file.display()
    ));
    Ok(written)
}

fn write_change(out: &mut impl Write, c: &Change) -> anyhow::Result<()> {
    out.write_all(b"---\n")?;
    serde_yaml::to_writer(&mut *out, c)?;
    out.flush()?;
    Ok(())
}

/// The latest `at` a recording may hold: a year.
const MAX_AT: f64 = 366.0 * 86400.0;

/// Reads a recording (at most `max` changes).
pub fn read(file: &Path, max: usize) -> anyhow::Result<Vec<Change>> {
    let f = std::fs::File::open(file).with_context(|| format!("open {}", file.display()))?;
    let mut out = Vec::new();
    for (i, doc) in serde_yaml::Deserializer::from_reader(std::io::BufReader::new(f)).enumerate() {
        anyhow::ensure!(i < max, "{}: more than {max} changes", file.display());
        let v = Value::deserialize(doc)
            .with_context(|| format!("{}: document {}", file.display(), i + 1))?;
        if v.is_null() {
            continue;
        }
        let c: Change = serde_json::from_value(v).with_context(|| {
            format!(
                "{}: document {} is not a recorded change",
                file.display(),
                i + 1
            )
        })?;
        anyhow::ensure!(
            c.at.is_finite() && (0.0..=MAX_AT).contains(&c.at),
            "{}: document {}: at {} is not a time in the recording (0 to {MAX_AT} s)",
            file.display(),
            i + 1,
            c.at
        );
        anyhow::ensure!(
            matches!(c.kind.as_str(), "ADDED" | "MODIFIED" | "DELETED"),
            "{}: document {}: type {:?}",
            file.display(),
            i + 1,
            c.kind
        );
        out.push(c);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recording_reads_back() {
        let mut buf = Vec::new();
        let pod = serde_json::json!({"kind": "Pod", "metadata": {"name": "p"}});
        write_change(
            &mut buf,
            &Change {
                at: 0.0,
                kind: "ADDED".into(),
                object: pod.clone(),
            },
        )
        .unwrap();
        write_change(
            &mut buf,
            &Change {
                at: 1.5,
                kind: "DELETED".into(),
                object: pod.clone(),
            },
        )
        .unwrap();
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("r.yaml");
        std::fs::write(&f, &buf).unwrap();
        let back = read(&f, 100).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(
            (back[1].at, back[1].kind.as_str(), &back[1].object),
            (1.5, "DELETED", &pod)
        );
        assert!(read(&f, 1)
            .unwrap_err()
            .to_string()
            .contains("more than 1 changes"));
        std::fs::write(&f, "---\nat: 0\ntype: EXPLODED\nobject: {}\n").unwrap();
        assert!(read(&f, 10).unwrap_err().to_string().contains("EXPLODED"));
        // Refused one way or the other: JSON has no infinity or NaN.
        for at in [".inf", "-1", ".nan", "1e300"] {
            std::fs::write(&f, format!("---\nat: {at}\ntype: ADDED\nobject: {{}}\n")).unwrap();
            let e = read(&f, 10).unwrap_err().to_string();
            assert!(e.contains("document 1"), "{at}: {e}");
        }
    }

    #[test]
    fn managed_fields_are_left_out() {
        let o = trim(serde_json::json!({"metadata": {"name": "a", "managedFields": [{}]}}));
        assert_eq!(o, serde_json::json!({"metadata": {"name": "a"}}));
    }
}
