//! One RocksDB per Raft node, tuned for many nodes sharing a small machine, and the
//! versioned record format of everything this crate persists.
//!
//! Column families: `logs` (index → entry), `meta` (vote, committed, last purged) and
//! `sm` (the latest state-machine snapshot).

use std::io;
use std::ops::Deref;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use rocksdb::{BlockBasedOptions, Cache, ColumnFamilyDescriptor, Options, WriteOptions, DB};
use serde::de::DeserializeOwned;
use serde::Serialize;

pub(crate) const CF_LOGS: &str = "logs";
pub(crate) const CF_META: &str = "meta";
pub(crate) const CF_SM: &str = "sm";

/// Write buffer per column family (bytes).
pub const WRITE_BUFFER_BYTES: usize = 4 << 20;
/// Block cache per node (bytes).
pub const BLOCK_CACHE_BYTES: usize = 8 << 20;
/// Open table files per node.
pub const MAX_OPEN_FILES: i32 = 64;

/// The RocksDB options of a Raft node: 4 MiB write buffers, an 8 MiB block cache, one
/// background job and few open files, so that a dozen nodes fit on a 2-core machine.
/// Durability does not come from here but from the synced writes of the log store.
pub fn db_options() -> Options {
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    opts.set_max_background_jobs(1);
    opts.set_max_open_files(MAX_OPEN_FILES);
    opts.set_write_buffer_size(WRITE_BUFFER_BYTES);
    opts.set_max_write_buffer_number(2);
    opts.set_max_total_wal_size(16 << 20);
    opts.set_keep_log_file_num(2);
    opts.set_max_log_file_size(1 << 20);
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(&Cache::new_lru_cache(BLOCK_CACHE_BYTES));
    opts.set_block_based_table_factory(&table);
    opts
}

/// A node's open database. It closes when its last handle drops, which may happen on
/// another thread than the one stopping the node, and closing takes a while (RocksDB
/// waits for its background work, then releases its LOCK file). A restart in the same
/// process must wait for the close to *finish*, not only for the last handle to go: the
/// handle count reaches zero before the close begins, and opening the directory again
/// in that window fails with "lock hold by current process".
#[derive(Debug)]
pub struct Db {
    db: DB,
    /// On a [`MemoryDisk`]: blocking I/O (snapshot writes, the log's durability
    /// reports) runs inline on the calling task instead of on threads of its own, and
    /// a sync takes the disk's latency (`Some`, zero unless the simulation slows it).
    memory_sync_latency: Option<Arc<AtomicU64>>,
    // Declared after `db`: fields drop in order, so this marker goes only once RocksDB
    // has closed. `closed()` watches it.
    open: Arc<()>,
}

impl Db {
    /// Does blocking I/O run inline ([`MemoryDisk`])?
    pub fn inline_io(&self) -> bool {
        self.memory_sync_latency.is_some()
    }

    /// On a [`MemoryDisk`], how long a sync takes now ([`MemoryDisk::set_sync_latency`]);
    /// `None` on a real disk.
    pub(crate) fn memory_sync_latency(&self) -> Option<Duration> {
        self.memory_sync_latency.as_ref().map(|l| Duration::from_micros(l.load(Ordering::Relaxed)))
    }

    /// Runs blocking I/O `work` on the blocking thread pool — or inline on a
    /// [`MemoryDisk`], where nothing may happen outside the simulation's one thread.
    pub(crate) async fn blocking<T: Send + 'static>(self: &Arc<Self>, work: impl FnOnce(&Db) -> T + Send + 'static) -> io::Result<T> {
        if self.inline_io() {
            return Ok(work(self));
        }
        let db = self.clone();
        tokio::task::spawn_blocking(move || work(&db)).await.map_err(io::Error::other)
    }

    /// Dead (no strong count) once the database has closed and released its directory.
    pub fn closed(&self) -> Weak<()> {
        Arc::downgrade(&self.open)
    }
}

impl Deref for Db {
    type Target = DB;
    fn deref(&self) -> &DB {
        &self.db
    }
}

/// RocksDB's in-memory environment, for the deterministic simulation
/// (docs/simulation.md): the real log and state-machine stores run on it, their files
/// in memory. It lives as long as a clone of it, so a node the simulation crashes and
/// restarts on the same `MemoryDisk` finds what it wrote. It keeps every write, synced
/// or not (a power cut that loses unsynced writes is the crash tests' subject, on a
/// real disk). Blocking I/O on it runs inline ([`Db::inline_io`]). Its syncs take no
/// time unless the simulation makes the disk slow.
#[derive(Clone)]
pub struct MemoryDisk {
    env: rocksdb::Env,
    /// Microseconds a sync of the log takes (shared by every clone).
    sync_latency: Arc<AtomicU64>,
}

impl MemoryDisk {
    pub fn new() -> Result<MemoryDisk, rocksdb::Error> {
        Ok(MemoryDisk { env: rocksdb::Env::mem_env()?, sync_latency: Arc::default() })
    }

    /// From now on a sync of the log (an append's durability, a vote) takes `latency`
    /// of the node's (simulated) time: a slow disk. Zero is a healthy one.
    pub fn set_sync_latency(&self, latency: Duration) {
        self.sync_latency.store(latency.as_micros().try_into().unwrap_or(u64::MAX), Ordering::Relaxed);
    }
}

impl std::fmt::Debug for MemoryDisk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemoryDisk")
    }
}

/// Opens (or creates) the node's database under `dir`: on the OS's disk, or in
/// `memory`.
pub fn open_db(dir: &Path, memory: Option<&MemoryDisk>) -> Result<Arc<Db>, rocksdb::Error> {
    let with_env = |mut o: Options| {
        if let Some(m) = memory {
            o.set_env(&m.env);
        }
        o
    };
    let opts = with_env(db_options());
    let cfs = [CF_LOGS, CF_META, CF_SM].map(|name| ColumnFamilyDescriptor::new(name, with_env(db_options())));
    Ok(Arc::new(Db { db: DB::open_cf_descriptors(&opts, dir, cfs)?, memory_sync_latency: memory.map(|m| m.sync_latency.clone()), open: Arc::new(()) }))
}

/// Write options for everything that openraft is told is durable: synced to disk.
pub(crate) fn synced() -> WriteOptions {
    let mut w = WriteOptions::default();
    w.set_sync(true);
    w
}

/// The current version of every record this crate writes. A record is one version byte
/// followed by its bincode body; a reader refuses versions it does not know instead of
/// misreading them. A future version 2 adds a branch in [`decode`].
pub(crate) const RECORD_V1: u8 = 1;

pub(crate) fn encode<T: Serialize>(value: &T) -> io::Result<Vec<u8>> {
    let mut out = vec![RECORD_V1];
    bincode::serialize_into(&mut out, value).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    Ok(out)
}

pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> io::Result<T> {
    match bytes.split_first() {
        Some((&RECORD_V1, body)) => bincode::deserialize(body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)),
        Some((v, _)) => Err(io::Error::new(io::ErrorKind::InvalidData, format!("record version {v} is newer than this binary understands"))),
        None => Err(io::Error::new(io::ErrorKind::InvalidData, "empty record")),
    }
}

pub(crate) fn io_err(e: rocksdb::Error) -> io::Error {
    io::Error::other(e)
}

pub(crate) fn cf<'a>(db: &'a DB, name: &str) -> &'a rocksdb::ColumnFamily {
    // The column families are created by `open_db`; a missing one is a programming error.
    db.cf_handle(name).unwrap_or_else(|| panic!("column family {name} missing"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_unknown_versions_are_refused() {
        let bytes = encode(&(7u64, "x".to_string())).unwrap();
        assert_eq!(bytes[0], RECORD_V1);
        let back: (u64, String) = decode(&bytes).unwrap();
        assert_eq!(back, (7, "x".to_string()));
        let mut future = bytes.clone();
        future[0] = 2;
        assert!(decode::<(u64, String)>(&future).is_err());
        assert!(decode::<u64>(&[]).is_err());
    }
}
