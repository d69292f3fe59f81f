//! The redb file: tables, startup recovery into the in-memory index and lessor, and the two
//! transaction wrappers the rest of the store uses (a read snapshot and the writer's batch).

use std::path::Path;

use redb::{Database, Durability, ReadableTable, ReadableTableMetadata, TableDefinition};

use crate::apply::RecordStore;
use crate::error::StoreError;
use crate::index::{Meta, Rev, TreeIndex};
use crate::record::Record;

/// `(main, sub)` revision → encoded `Record`.
const KVS: TableDefinition<(u64, u32), &[u8]> = TableDefinition::new("kvs");
/// Small counters: current and compacted revision, cluster and member IDs.
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// Lease ID → granted TTL in seconds.
const LEASES: TableDefinition<i64, i64> = TableDefinition::new("leases");

pub const META_CURRENT_REV: &str = "current_rev";
pub const META_COMPACT_REV: &str = "compact_rev";
pub const META_CLUSTER_ID: &str = "cluster_id";
pub const META_MEMBER_ID: &str = "member_id";

fn key(rev: Rev) -> (u64, u32) {
    (rev.main as u64, rev.sub)
}

pub struct Backend {
    db: Database,
    /// The database file, or `None` for an in-memory store.
    file: Option<std::path::PathBuf>,
    /// The in-memory store's length (what the file's would be).
    memory_len: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// redb's in-memory backend, recording its length for `Backend::size` (etcd's dbSize).
#[derive(Debug)]
struct MemoryBackend {
    inner: redb::backends::InMemoryBackend,
    len: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl redb::StorageBackend for MemoryBackend {
    fn len(&self) -> std::io::Result<u64> {
        self.inner.len()
    }
    fn read(&self, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
        self.inner.read(offset, len)
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.inner.set_len(len)?;
        self.len.store(len, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
    fn sync_data(&self, eventual: bool) -> std::io::Result<()> {
        self.inner.sync_data(eventual)
    }
    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.inner.write(offset, data)
    }
}

/// Everything recovered from disk at startup.
pub struct Recovered {
    pub index: TreeIndex,
    pub current_rev: i64,
    pub compact_rev: i64,
    pub cluster_id: u64,
    pub member_id: u64,
    /// `(id, ttl)` of every granted lease.
    pub leases: Vec<(i64, i64)>,
}

impl Backend {
    /// Opens (or creates) the database in `dir`, or an empty one in memory when `dir` is
    /// `None` (`--ephemeral`: nothing survives the process, nothing touches the disk).
    pub fn open(dir: Option<&Path>, cache_bytes: usize) -> Result<Self, StoreError> {
        let memory_len = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut builder = Database::builder();
        builder.set_cache_size(cache_bytes);
        let (db, file) = match dir {
            Some(dir) => {
                std::fs::create_dir_all(dir)
                    .map_err(|e| StoreError::Internal(format!("create {}: {e}", dir.display())))?;
                let file = dir.join("rkube-store.redb");
                (builder.create(&file)?, Some(file))
            }
            None => {
                let backend = MemoryBackend {
                    inner: redb::backends::InMemoryBackend::new(),
                    len: memory_len.clone(),
                };
                (builder.create_with_backend(backend)?, None)
            }
        };
        let wtx = db.begin_write()?;
        {
            wtx.open_table(KVS)?;
            let mut meta = wtx.open_table(META)?;
            if meta.get(META_CLUSTER_ID)?.is_none() {
                meta.insert(META_CLUSTER_ID, rand::random::<u64>())?;
                meta.insert(META_MEMBER_ID, rand::random::<u64>())?;
                meta.insert(META_CURRENT_REV, 1)?;
                meta.insert(META_COMPACT_REV, 0)?;
            }
            wtx.open_table(LEASES)?;
        }
        wtx.commit()?;
        Ok(Backend {
            db,
            file,
            memory_len,
        })
    }

    /// Rebuilds the key index by scanning every stored revision in order.
    pub fn recover(&self) -> Result<Recovered, StoreError> {
        let rtx = self.db.begin_read()?;
        let meta = rtx.open_table(META)?;
        let get = |k: &str| -> Result<u64, StoreError> {
            Ok(meta.get(k)?.map(|v| v.value()).unwrap_or(0))
        };
        let mut current_rev = get(META_CURRENT_REV)? as i64;
        let compact_rev = get(META_COMPACT_REV)? as i64;
        let cluster_id = get(META_CLUSTER_ID)?;
        let member_id = get(META_MEMBER_ID)?;
        let kvs = rtx.open_table(KVS)?;
        let mut index = TreeIndex::default();
        for entry in kvs.iter()? {
            let (k, v) = entry?;
            let (main, sub) = k.value();
            let (key, tombstone, create_revision, version, lease) = Record::decode_meta(v.value())
                .ok_or_else(|| {
                    StoreError::Internal(format!("corrupt record at revision {main}"))
                })?;
            let rev = Rev {
                main: main as i64,
                sub,
            };
            let meta = Meta {
                create_revision,
                mod_revision: main as i64,
                version,
                lease,
            };
            index.restore(key, rev, tombstone, meta);
            current_rev = current_rev.max(main as i64);
        }
        let leases = rtx
            .open_table(LEASES)?
            .iter()?
            .map(|e| e.map(|(k, v)| (k.value(), v.value())))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Recovered {
            index,
            current_rev,
            compact_rev,
            cluster_id,
            member_id,
            leases,
        })
    }

    pub fn read(&self) -> Result<ReadSnapshot, StoreError> {
        let rtx = self.db.begin_read()?;
        let kvs = rtx.open_table(KVS)?;
        Ok(ReadSnapshot { kvs })
    }

    pub fn begin_batch(&self) -> Result<redb::WriteTransaction, StoreError> {
        let mut wtx = self.db.begin_write()?;
        wtx.set_durability(Durability::Immediate);
        Ok(wtx)
    }

    /// Bytes of the database file (dbSize).
    /// The database's size in bytes (the file's, or the in-memory store's).
    pub fn size(&self) -> u64 {
        match &self.file {
            Some(file) => std::fs::metadata(file).map(|m| m.len()).unwrap_or(0),
            None => self.memory_len.load(std::sync::atomic::Ordering::Relaxed),
        }
    }
}

/// A consistent read view of the records.
pub struct ReadSnapshot {
    kvs: redb::ReadOnlyTable<(u64, u32), &'static [u8]>,
}

impl ReadSnapshot {
    pub fn get(&self, rev: Rev) -> Result<Option<Record>, StoreError> {
        match self.kvs.get(key(rev))? {
            Some(v) => Record::decode(v.value()).map(Some).ok_or_else(|| {
                StoreError::Internal(format!("corrupt record at revision {}", rev.main))
            }),
            None => Ok(None),
        }
    }

    /// Records with main revision in `[from, to]`, in revision order, at most `max` of them
    /// (always ending on a whole main revision).
    pub fn scan(&self, from: i64, to: i64, max: usize) -> Result<Vec<(Rev, Record)>, StoreError> {
        let mut out: Vec<(Rev, Record)> = Vec::new();
        let start = (from.max(0) as u64, 0u32);
        let end = (to.max(0) as u64, u32::MAX);
        for entry in self.kvs.range(start..=end)? {
            let (k, v) = entry?;
            let (main, sub) = k.value();
            if out.len() >= max && out.last().is_some_and(|(r, _)| r.main != main as i64) {
                break;
            }
            let rec = Record::decode(v.value()).ok_or_else(|| {
                StoreError::Internal(format!("corrupt record at revision {main}"))
            })?;
            out.push((
                Rev {
                    main: main as i64,
                    sub,
                },
                rec,
            ));
        }
        Ok(out)
    }

    pub fn len(&self) -> u64 {
        self.kvs.len().unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The writer's view of one group-commit batch: reads see the batch's own writes.
pub struct BatchStore<'t> {
    /// Whether anything was written (a clean batch needs no commit and no fsync).
    pub dirty: bool,
    pub kvs: redb::Table<'t, (u64, u32), &'static [u8]>,
    pub meta: redb::Table<'t, &'static str, u64>,
    pub leases: redb::Table<'t, i64, i64>,
}

impl<'t> BatchStore<'t> {
    pub fn open(wtx: &'t redb::WriteTransaction) -> Result<Self, StoreError> {
        Ok(BatchStore {
            dirty: false,
            kvs: wtx.open_table(KVS)?,
            meta: wtx.open_table(META)?,
            leases: wtx.open_table(LEASES)?,
        })
    }

    pub fn set_meta(&mut self, k: &str, v: i64) -> Result<(), StoreError> {
        self.meta.insert(k, v as u64)?;
        Ok(())
    }
}

impl RecordStore for BatchStore<'_> {
    fn get(&mut self, rev: Rev) -> Result<Option<Record>, StoreError> {
        match self.kvs.get(key(rev))? {
            Some(v) => Ok(Record::decode(v.value())),
            None => Ok(None),
        }
    }
    fn insert(&mut self, rev: Rev, rec: &Record) -> Result<(), StoreError> {
        self.dirty = true;
        self.kvs.insert(key(rev), rec.encode().as_slice())?;
        Ok(())
    }
    fn remove(&mut self, rev: Rev) -> Result<(), StoreError> {
        self.dirty = true;
        self.kvs.remove(key(rev))?;
        Ok(())
    }
    fn put_lease(&mut self, id: i64, ttl: i64) -> Result<(), StoreError> {
        self.dirty = true;
        self.leases.insert(id, ttl)?;
        Ok(())
    }
    fn remove_lease(&mut self, id: i64) -> Result<(), StoreError> {
        self.dirty = true;
        self.leases.remove(id)?;
        Ok(())
    }
}
