//! `rkube snapshot save|restore`: a cluster's whole store as a file, through the etcd API, so
//! it works the same on rkube-store and on etcd. Saving reads every key at one revision (a
//! consistent cut, paged by key); restoring stops the cluster, sets the old data aside, starts
//! an empty store, writes the keys back (batched transactions, several in flight), then starts
//! the rest; on an error the old data comes back.
//!
//! The file is JSON lines: a header `{"kind":"RkubeSnapshot","version":1,"cluster":…,
//! "revision":…,"keys":N}` then one `{"k":base64,"v":base64[,"lease":true]}` per key.
//! Keys that were attached to a lease (Events) are attached to a fresh one-hour lease, as
//! the apiserver's event TTL. rkube-store's Maintenance.Snapshot streams the same format
//! (so `etcdctl snapshot save` of an rkube-store restores here) with etcd's trailer, the
//! SHA-256 of everything before it, which restore checks and strips.

use std::io::{BufRead, BufWriter, Read, Seek, Write};
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};
use futures_util::{StreamExt, TryStreamExt};
use rkube_etcd_api::codec::{decode_b64, encode_b64};
use rkube_etcd_api::{EtcdClient, PutRequest, RangeRequest, RequestOp, TxnRequest};
use serde::{Deserialize, Serialize};

use super::home::{Home, Spec};
use super::lifecycle::{self, State};
use super::steps::Steps;

const KIND: &str = "RkubeSnapshot";
/// Keys read per Range while saving.
const PAGE: i64 = 1000;
/// Operations and value bytes per restoring Txn (under etcd's 128 ops and 1.5 MiB).
const BATCH_OPS: usize = 128;
const BATCH_BYTES: usize = 1 << 20;
/// Restoring transactions in flight.
const IN_FLIGHT: usize = 8;
/// The largest snapshot file restore reads (it is checked whole before the store is touched).
const MAX_FILE: u64 = 4 << 30;
/// The apiserver's compaction bookkeeping: not cluster state, and a fresh store starts it anew.
const SKIP: &[&[u8]] = &[b"compact_rev_key"];

/// A key, its value, and whether it was attached to a lease.
type Kv = (Vec<u8>, Vec<u8>, bool);

#[derive(Serialize, Deserialize, Debug)]
struct Header {
    kind: String,
    version: u32,
    cluster: String,
    revision: i64,
    keys: u64,
}

#[derive(Serialize, Deserialize, Debug)]
struct Entry {
    k: String,
    v: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    lease: bool,
}

/// A client of the cluster's store (the apiserver's own client certificate when secure).
fn store_client(spec: &Spec, home: &Home) -> anyhow::Result<EtcdClient> {
    let tls = if spec.secure && !spec.etcd {
        let read = |f: &str| std::fs::read(home.pki().join(f)).with_context(|| f.to_string());
        let mut identity = read("apiserver-etcd-client.crt")?;
        identity.push(b'\n');
        identity.extend(read("apiserver-etcd-client.key")?);
        Some(rkube_etcd_api::ClientTls {
            ca_pem: Some(read("ca.crt")?),
            identity_pem: Some(identity),
        })
    } else {
        None
    };
    Ok(EtcdClient::with_tls(&[spec.store_url()], tls.as_ref())?)
}

/// Writes every key of `name`'s store at one revision to `file`; returns how many.
pub async fn save(name: &str, file: &Path, steps: &Steps) -> anyhow::Result<u64> {
    let home = Home::of(name)?;
    let spec = home.load()?;
    let store = if spec.etcd { "etcd" } else { "store" };
    if lifecycle::state(&spec, &home)? == State::Stopped
        || super::procs::running(&home, store).is_none()
    {
        bail!("cluster {name:?}'s store is not running: `rkube cluster start {name}` first");
    }
    let step = steps.start(format!(
        "snapshot of {name:?} written to {}",
        file.display()
    ));
    let client = store_client(&spec, &home)?;
    // Pages go to a temporary file renamed into place: a failed save leaves no half file.
    let tmp = file.with_extension("partial");
    let written = async {
        let mut entries: Vec<Entry> = Vec::new();
        let mut key = vec![0u8];
        let mut revision = 0;
        loop {
            let resp = client
                .range(&RangeRequest {
                    key: key.clone(),
                    range_end: vec![0],
                    limit: PAGE,
                    revision,
                    ..Default::default()
                })
                .await
                .context("read the store")?;
            if revision == 0 {
                revision = resp.header.as_ref().map_or(0, |h| h.revision);
            }
            let more = resp.more;
            if let Some(last) = resp.kvs.last() {
                key = last.key.clone();
                key.push(0);
            }
            entries.extend(
                resp.kvs
                    .into_iter()
                    .filter(|kv| !SKIP.contains(&kv.key.as_slice()))
                    .map(|kv| Entry {
                        k: encode_b64(&kv.key),
                        v: encode_b64(&kv.value),
                        lease: kv.lease != 0,
                    }),
            );
            if !more {
                break;
            }
        }
        let mut out = BufWriter::new(crate::cluster::create_private(&tmp)?);
        let header = Header {
            kind: KIND.into(),
            version: 1,
            cluster: name.into(),
            revision,
            keys: entries.len() as u64,
        };
        serde_json::to_writer(&mut out, &header)?;
        out.write_all(b"\n")?;
        for e in &entries {
            serde_json::to_writer(&mut out, e)?;
            out.write_all(b"\n")?;
        }
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&tmp, file).with_context(|| format!("write {}", file.display()))?;
        anyhow::Ok(header.keys)
    }
    .await;
    match written {
        Ok(n) => {
            step.done_with(&format!("{n} keys"));
            Ok(n)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            step.fail();
            Err(e)
        }
    }
}

/// The length of a snapshot file without its SHA-256 trailer, if it has one. etcd's rule:
/// a streamed snapshot is whole 512-byte pages plus the 32-byte digest of them (files `save`
/// writes end with a newline instead). A file of that shape whose digest does not match is
/// refused unless it ends as a saved file does.
fn body_len(mut f: &std::fs::File, len: u64) -> anyhow::Result<u64> {
    let saved_shape = |f: &mut &std::fs::File| -> anyhow::Result<bool> {
        let mut last = [0u8; 1];
        f.seek(std::io::SeekFrom::Start(len - 1))?;
        f.read_exact(&mut last)?;
        Ok(last[0] == b'\n')
    };
    if len % 512 != 32 {
        f.rewind()?;
        return Ok(len);
    }
    let body = len - 32;
    f.rewind()?;
    let mut sha = ring::digest::Context::new(&ring::digest::SHA256);
    let mut rest = f.take(body);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = rest.read(&mut buf)?;
        if n == 0 {
            break;
        }
        sha.update(&buf[..n]);
    }
    let mut trailer = [0u8; 32];
    f.read_exact(&mut trailer)?;
    let matches = sha.finish().as_ref() == trailer;
    if !matches && !saved_shape(&mut f)? {
        anyhow::bail!(
            "its last 32 bytes are not the SHA-256 of the rest (a damaged or cut-off file?)"
        );
    }
    f.rewind()?;
    Ok(if matches { body } else { len })
}

/// Reads and checks a whole snapshot file.
fn read(file: &Path) -> anyhow::Result<(Header, Vec<Kv>)> {
    let f = std::fs::File::open(file).with_context(|| format!("open {}", file.display()))?;
    let len = f.metadata()?.len();
    anyhow::ensure!(
        len <= MAX_FILE,
        "{}: {len} bytes, more than a snapshot holds",
        file.display()
    );
    let bad = |what: String| anyhow::anyhow!("{} is not an rkube snapshot: {what}", file.display());
    let body = body_len(&f, len).map_err(|e| bad(e.to_string()))?;
    let mut lines = std::io::BufReader::new(f.take(body)).lines();
    let first = lines
        .next()
        .transpose()?
        .ok_or_else(|| bad("it is empty".into()))?;
    let header: Header = serde_json::from_str(&first).map_err(|e| bad(format!("header: {e}")))?;
    if header.kind != KIND || header.version != 1 {
        return Err(bad(format!(
            "kind {:?} version {}",
            header.kind, header.version
        )));
    }
    let mut kvs = Vec::new();
    for (i, line) in lines.enumerate() {
        let line = line?;
        // Streamed snapshots pad their last 512-byte page with blank lines.
        if line.trim().is_empty() {
            continue;
        }
        let e: Entry =
            serde_json::from_str(&line).map_err(|e| bad(format!("line {}: {e}", i + 2)))?;
        let k = decode_b64(&e.k).map_err(|e| bad(format!("line {}: key: {e}", i + 2)))?;
        let v = decode_b64(&e.v).map_err(|e| bad(format!("line {}: value: {e}", i + 2)))?;
        kvs.push((k, v, e.lease));
    }
    if kvs.len() as u64 != header.keys {
        return Err(bad(format!(
            "{} keys where the header says {} (a cut-off file?)",
            kvs.len(),
            header.keys
        )));
    }
    Ok((header, kvs))
}

/// Replaces `name`'s store with `file`'s keys and starts the cluster.
pub async fn restore(name: &str, file: &Path, steps: &Steps) -> anyhow::Result<u64> {
    let home = Home::of(name)?;
    let spec = home.load()?;
    let (header, kvs) = read(file)?;
    if lifecycle::state(&spec, &home)? != State::Stopped {
        lifecycle::stop(name, steps)?;
    }
    let data = home.data(spec.etcd);
    let aside = data.with_extension("before-restore");
    if aside.exists() {
        // An earlier restore was cut off: what it set aside is the cluster's last good data.
        steps.say(&format!(
            "an earlier restore of {name:?} did not finish: its previous data is put back first"
        ));
        let _ = std::fs::remove_dir_all(&data);
        std::fs::rename(&aside, &data).context("put the store's previous data back")?;
    }
    if !lifecycle::port_free(spec.ports.apiserver) {
        bail!(
            "port {} of cluster {name:?}'s apiserver is in use by another program: stop it first (nothing was changed)",
            spec.ports.apiserver
        );
    }
    if data.exists() {
        std::fs::rename(&data, &aside).context("set the store's data aside")?;
    }
    let restored = lifecycle::interruptible(async {
        lifecycle::launch_stages(&spec, &home, &[super::plan::Stage::Storage], steps).await?;
        let step = steps.start(format!(
            "{} keys restored from {} (revision {} of {:?})",
            header.keys,
            file.display(),
            header.revision,
            header.cluster
        ));
        match write_all(&store_client(&spec, &home)?, kvs).await {
            Ok(()) => step.done(),
            Err(e) => {
                step.fail();
                return Err(e);
            }
        }
        lifecycle::stop(name, &Steps::new(true))?;
        lifecycle::start(name, steps).await
    })
    .await;
    if let Err(e) = restored {
        // The previous data comes back whatever failed (the file, the store, a component).
        lifecycle::stop(name, &Steps::new(true))?;
        let _ = std::fs::remove_dir_all(&data);
        if aside.exists() {
            std::fs::rename(&aside, &data).context("put the store's data back")?;
        }
        return Err(e.context(format!(
            "restore failed; cluster {name:?} has its previous data back (stopped: `rkube cluster start {name}`)"
        )));
    }
    let _ = std::fs::remove_dir_all(&aside);
    Ok(header.keys)
}

/// Puts every key in batched transactions, [`IN_FLIGHT`] at once.
async fn write_all(client: &EtcdClient, kvs: Vec<Kv>) -> anyhow::Result<()> {
    let lease = if kvs.iter().any(|(_, _, l)| *l) {
        let grant = client
            .lease_grant(&rkube_etcd_api::LeaseGrantRequest {
                ttl: 3600,
                ..Default::default()
            })
            .await
            .context("grant the events' lease")?;
        grant.id
    } else {
        0
    };
    let mut batches: Vec<Vec<RequestOp>> = vec![Vec::new()];
    let mut bytes = 0;
    for (key, value, leased) in kvs {
        let size = key.len() + value.len();
        let last = batches.last_mut().expect("one batch");
        if !last.is_empty() && (last.len() >= BATCH_OPS || bytes + size > BATCH_BYTES) {
            batches.push(Vec::new());
            bytes = 0;
        }
        bytes += size;
        batches.last_mut().expect("one batch").push(RequestOp {
            request_put: Some(PutRequest {
                key,
                value,
                lease: if leased { lease } else { 0 },
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    futures_util::stream::iter(batches.into_iter().filter(|b| !b.is_empty()))
        .map(|ops| async move {
            tokio::time::timeout(
                Duration::from_secs(30),
                client.txn(&TxnRequest {
                    success: ops,
                    ..Default::default()
                }),
            )
            .await
            .context("the store did not answer in 30 s")?
            .context("write to the store")
        })
        .buffer_unordered(IN_FLIGHT)
        .try_for_each(|_| async { Ok(()) })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_off_or_foreign_file_is_refused_before_the_store_is_touched() {
        let t = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let p = t.path().join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let ok = write(
            "ok",
            "{\"kind\":\"RkubeSnapshot\",\"version\":1,\"cluster\":\"a\",\"revision\":9,\"keys\":1}\n{\"k\":\"YQ==\",\"v\":\"Yg==\",\"lease\":true}\n",
        );
        let (h, kvs) = read(&ok).unwrap();
        assert_eq!(h.revision, 9);
        assert_eq!(kvs, vec![(b"a".to_vec(), b"b".to_vec(), true)]);
        let short = write(
            "short",
            "{\"kind\":\"RkubeSnapshot\",\"version\":1,\"cluster\":\"a\",\"revision\":9,\"keys\":2}\n{\"k\":\"YQ==\",\"v\":\"Yg==\"}\n",
        );
        assert!(read(&short).unwrap_err().to_string().contains("cut-off"));
        let foreign = write("foreign", "apiVersion: v1\nkind: List\n");
        assert!(read(&foreign)
            .unwrap_err()
            .to_string()
            .contains("not an rkube snapshot"));
        let bad_b64 = write(
            "b64",
            "{\"kind\":\"RkubeSnapshot\",\"version\":1,\"cluster\":\"a\",\"revision\":9,\"keys\":1}\n{\"k\":\"!!\",\"v\":\"\"}\n",
        );
        assert!(read(&bad_b64)
            .unwrap_err()
            .to_string()
            .contains("line 2: key"));
        assert!(read(&t.path().join("missing")).is_err());
    }

    #[test]
    fn an_etcd_style_sha256_trailer_is_checked_and_stripped() {
        let t = tempfile::tempdir().unwrap();
        let head = "{\"kind\":\"RkubeSnapshot\",\"version\":1,\"cluster\":\"a\",\"revision\":9,\"keys\":1}\n{\"k\":\"YQ==\",\"v\":\"Yg==\"}\n";
        // Whole 512-byte pages (blank lines pad the last), then the digest; the pages are
        // varied until the digest ends in a newline too (what a saved file ends with).
        let (text, digest) = (0..10_000)
            .map(|i| {
                let mut t = head.to_string();
                t.push_str(&" ".repeat(i % 200));
                t.push('\n');
                while !t.len().is_multiple_of(512) {
                    t.push('\n');
                }
                let d = ring::digest::digest(&ring::digest::SHA256, t.as_bytes());
                (t, d)
            })
            .find(|(_, d)| d.as_ref()[31] == b'\n')
            .expect("a digest ending in a newline");
        let mut bytes = text.as_bytes().to_vec();
        bytes.extend_from_slice(digest.as_ref());
        let p = t.path().join("streamed");
        std::fs::write(&p, &bytes).unwrap();
        let (_, kvs) = read(&p).unwrap();
        assert_eq!(kvs, vec![(b"a".to_vec(), b"b".to_vec(), false)]);
        // One flipped byte in the body: the trailer no longer matches, and the file is
        // refused (read as a saved file, its digest is no line of a snapshot).
        bytes[head.len() - 8] ^= 1;
        std::fs::write(&p, &bytes).unwrap();
        assert!(read(&p).is_err());
        // A damaged streamed file whose digest does not end like a saved file: named so.
        let mut other = b"{}".to_vec();
        other.resize(512, b'\n');
        other.extend_from_slice(&[7u8; 32]);
        std::fs::write(&p, &other).unwrap();
        let err = read(&p).unwrap_err().to_string();
        assert!(err.contains("SHA-256"), "{err}");
    }
}
