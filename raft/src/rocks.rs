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
    /// reports) runs inline on the calling task instead of on threads of its own, a
    /// sync takes the disk's latency (zero unless the simulation slows it), and the
    /// disk keeps account of the log entries not yet synced (for a power cut).
    memory: Option<MemoryDisk>,
    // Declared after `db`: fields drop in order, so this marker goes only once RocksDB
    // has closed. `closed()` watches it.
    open: Arc<()>,
}

impl Db {
    /// Does blocking I/O run inline ([`MemoryDisk`])?
    pub fn inline_io(&self) -> bool {
        self.memory.is_some()
    }

    /// On a [`MemoryDisk`], how long a sync takes now ([`MemoryDisk::set_sync_latency`]);
    /// `None` on a real disk.
    pub(crate) fn memory_sync_latency(&self) -> Option<Duration> {
        self.memory.as_ref().map(|m| Duration::from_micros(m.sync_latency.load(Ordering::Relaxed)))
    }

    /// The memory disk this database runs on, if any.
    pub(crate) fn memory(&self) -> Option<&MemoryDisk> {
        self.memory.as_ref()
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
/// restarts on the same `MemoryDisk` finds what it wrote. Blocking I/O on it runs
/// inline ([`Db::inline_io`]). Its syncs take no time unless the simulation makes the
/// disk slow.
///
/// A crash keeps every write; a power cut ([`MemoryDisk::power_cut`]) loses the log
/// entries written and not yet synced — those whose durability the log store has not
/// yet reported to openraft, the ones a real disk may lose with its page cache. They
/// are dropped when the node starts on the disk again.
#[derive(Clone)]
pub struct MemoryDisk {
    env: rocksdb::Env,
    /// Microseconds a sync of the log takes (shared by every clone).
    sync_latency: Arc<AtomicU64>,
    /// Log indexes written and not yet synced, and whether the power was cut since.
    unsynced: Arc<std::sync::Mutex<Unsynced>>,
}

#[derive(Debug, Default)]
struct Unsynced {
    indexes: std::collections::BTreeSet<u64>,
    power_cut: bool,
}

impl MemoryDisk {
    pub fn new() -> Result<MemoryDisk, rocksdb::Error> {
        Ok(MemoryDisk { env: rocksdb::Env::mem_env()?, sync_latency: Arc::default(), unsynced: Arc::default() })
    }

    fn unsynced(&self) -> std::sync::MutexGuard<'_, Unsynced> {
        self.unsynced.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The power goes: what was written and not synced is lost when the node next
    /// starts on this disk. Call it with the node crashed (nothing writes meanwhile).
    pub fn power_cut(&self) {
        self.unsynced().power_cut = true;
    }

    /// Log entries written, not yet synced.
    pub(crate) fn written(&self, indexes: &[u64]) {
        self.unsynced().indexes.extend(indexes);
    }

    /// Log entries made durable by a sync.
    pub(crate) fn synced(&self, indexes: &[u64]) {
        let mut u = self.unsynced();
        for i in indexes {
            u.indexes.remove(i);
        }
    }

    /// Log entries from `from` on were deleted (a truncation).
    pub(crate) fn dropped_from(&self, from: u64) {
        self.unsynced().indexes.retain(|i| *i < from);
    }

    /// After a power cut, the entries it lost (once); nothing otherwise.
    pub(crate) fn lost_to_power_cut(&self) -> Option<Vec<u64>> {
        let mut u = self.unsynced();
        if !std::mem::take(&mut u.power_cut) {
            return None;
        }
        Some(std::mem::take(&mut u.indexes).into_iter().collect())
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
    Ok(Arc::new(Db { db: DB::open_cf_descriptors(&opts, dir, cfs)?, memory: memory.cloned(), open: Arc::new(()) }))
}

/// Write options for everything that openraft is told is durable: synced to disk.
pub(crate) fn synced() -> WriteOptions {
    let mut w = WriteOptions::default();
    w.set_sync(true);
    w
}

/// The current version of every record this crate writes. A record is one version byte
/// followed by its bincode body; a reader refuses versions it does not know instead of
/// misreading them.
///
/// - 1: the first format.
/// - 2: a membership's nodes carry their disk identity (`types.rs`, `Node::disk`).
///   Records of version 1 are still read (their nodes with disk 0, "not known").
pub(crate) const RECORD_V2: u8 = 2;
pub(crate) const RECORD_V1: u8 = 1;

pub(crate) fn encode<T: Serialize>(value: &T) -> io::Result<Vec<u8>> {
    let mut out = vec![RECORD_V2];
    bincode::serialize_into(&mut out, value).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    Ok(out)
}

pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> io::Result<T> {
    let bad = |e| io::Error::new(io::ErrorKind::InvalidData, e);
    match bytes.split_first() {
        Some((&RECORD_V2, body)) => bincode::deserialize(body).map_err(bad),
        Some((&RECORD_V1, body)) => crate::types::nodes_without_disk(|| bincode::deserialize(body)).map_err(bad),
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
        assert_eq!(bytes[0], RECORD_V2);
        let back: (u64, String) = decode(&bytes).unwrap();
        assert_eq!(back, (7, "x".to_string()));
        let mut future = bytes.clone();
        future[0] = 3;
        assert!(decode::<(u64, String)>(&future).is_err());
        assert!(decode::<u64>(&[]).is_err());
    }

    /// Records written before nodes carried their disk (version 1) are still read, the
    /// disk as "not known"; what is written now carries it.
    #[test]
    fn a_membership_written_before_disk_identities_is_still_read() {
        use crate::types::{Membership, Node};
        use std::collections::{BTreeMap, BTreeSet};
        #[derive(Serialize)]
        struct NodeV1 {
            raft_addr: String,
            client_addr: String,
        }
        // What release 1 wrote for a one-node membership: the same shape, the node without a disk.
        let v1_nodes: BTreeMap<u64, NodeV1> = [(1, NodeV1 { raft_addr: "a:1".into(), client_addr: "a:2".into() })].into();
        let v1_configs: Vec<BTreeSet<u64>> = vec![[1].into()];
        let mut old = vec![RECORD_V1];
        bincode::serialize_into(&mut old, &(v1_configs, v1_nodes)).unwrap();
        let (configs, nodes): (Vec<BTreeSet<u64>>, BTreeMap<u64, Node>) = decode(&old).unwrap();
        assert_eq!(nodes[&1], Node::new("a:1", "a:2"));
        let m = Membership::new(configs, nodes).unwrap();
        // Written again, it is version 2, with the disk.
        let with_disk: BTreeMap<u64, Node> = [(1, Node::new("a:1", "a:2").on_disk(42))].into();
        let bytes = encode(&(m.get_joint_config().clone(), with_disk)).unwrap();
        assert_eq!(bytes[0], RECORD_V2);
        let (_, back): (Vec<BTreeSet<u64>>, BTreeMap<u64, Node>) = decode(&bytes).unwrap();
        assert_eq!(back[&1].disk, 42);
    }
}
