//! [`RocksFence`]: the fencing rule over RocksDB, durable across restarts.

use crate::record::{data_key, decode_data, decode_fence, encode_data, encode_fence, fence_key};
use crate::{admit, Accepted, FenceError, FencedStore, LockId, Mutation, Stored};
use holdfast_core::FencingToken;
use rocksdb::{BlockBasedOptions, Cache, Options, WriteBatch, WriteOptions, DB};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};
use tracing::info;

#[cfg(test)]
mod tests;

/// Number of mutexes that serialize writers; locks hash onto them.
const STRIPES: usize = 64;

/// RocksDB settings of a [`RocksFence`]. The defaults suit a small resource on a
/// shared machine; raise them for a resource that writes a lot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RocksFenceOptions {
    /// Memtable size before a flush, in bytes. Default 4 MiB; at least 64 KiB.
    pub write_buffer_bytes: usize,
    /// Threads for flushes and compactions. Default 1; at least 1.
    pub max_background_jobs: i32,
    /// Block cache for reads, in bytes. Default 8 MiB; at least 1 MiB.
    pub block_cache_bytes: usize,
}

impl Default for RocksFenceOptions {
    fn default() -> Self {
        RocksFenceOptions { write_buffer_bytes: 4 << 20, max_background_jobs: 1, block_cache_bytes: 8 << 20 }
    }
}

impl RocksFenceOptions {
    pub fn validate(&self) -> Result<(), FenceError> {
        let invalid = |field, reason: String| Err(FenceError::InvalidConfig { field, reason });
        if self.write_buffer_bytes < 64 << 10 {
            return invalid("write_buffer_bytes", format!("{} is below 64 KiB", self.write_buffer_bytes));
        }
        if self.max_background_jobs < 1 {
            return invalid("max_background_jobs", format!("{} is below 1", self.max_background_jobs));
        }
        if self.block_cache_bytes < 1 << 20 {
            return invalid("block_cache_bytes", format!("{} is below 1 MiB", self.block_cache_bytes));
        }
        Ok(())
    }
}

/// A fenced store on RocksDB: the resource keeps its data in it, and every write
/// carries the writer's fencing token.
///
/// Invariants (see [`FencedStore`] for the contract):
/// - the token check, the data and the new fence go to RocksDB in **one**
///   `WriteBatch` under the lock's mutex, so a crash leaves either all of a write or
///   none of it, and two writers of one lock cannot interleave check and write;
/// - every write is synced before it is acknowledged, so an accepted write and the
///   fence it raised survive a crash or power loss, and a restarted resource keeps
///   rejecting the tokens it rejected before;
/// - the mutexes live in this process, which is enough because RocksDB lets only one
///   process open a database (its `LOCK` file); a second open fails.
#[derive(Debug)]
pub struct RocksFence {
    db: DB,
    resource: String,
    /// Why striped mutexes and not a `TransactionDB`: the critical section is "read
    /// one key, write one batch", and a mutex makes it atomic with no conflict or
    /// lock-timeout errors for callers to retry and no extra machinery in RocksDB.
    /// A transaction would serialize writers of a lock just the same, since every
    /// write also waits for its fsync. Striping bounds memory whatever the number of
    /// locks; two locks sharing a stripe only wait for each other, and RocksDB still
    /// groups the fsyncs of writers on different stripes.
    stripes: Box<[Mutex<()>]>,
}

impl RocksFence {
    /// Opens (creating if missing) the store at `path` for the resource named
    /// `resource`, the label of its rejection counter.
    pub fn open(path: impl AsRef<Path>, resource: impl Into<String>, options: &RocksFenceOptions) -> Result<RocksFence, FenceError> {
        options.validate()?;
        let resource = resource.into();
        if resource.is_empty() {
            return Err(FenceError::InvalidConfig { field: "resource", reason: "must not be empty".into() });
        }
        let path = path.as_ref();

        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.set_write_buffer_size(options.write_buffer_bytes);
        opts.set_max_background_jobs(options.max_background_jobs);
        let mut table = BlockBasedOptions::default();
        table.set_block_cache(&Cache::new_lru_cache(options.block_cache_bytes));
        opts.set_block_based_table_factory(&table);

        let db = DB::open(&opts, path).map_err(|source| FenceError::Storage { op: "open", source })?;
        crate::describe_metrics();
        info!(resource = %resource, path = %path.display(), "fenced store opened");
        let stripes = (0..STRIPES).map(|_| Mutex::new(())).collect();
        Ok(RocksFence { db, resource, stripes })
    }

    fn stripe(&self, fence_key: &[u8]) -> MutexGuard<'_, ()> {
        let mut h = DefaultHasher::new();
        fence_key.hash(&mut h);
        let stripe = &self.stripes[(h.finish() % STRIPES as u64) as usize];
        // The mutex guards no Rust data, only the order of RocksDB writes, and a
        // write batch is atomic: a panic while holding it left nothing half done.
        stripe.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn read_fence(&self, fence_key: &[u8]) -> Result<Option<FencingToken>, FenceError> {
        let raw = self.db.get_pinned(fence_key).map_err(|source| FenceError::Storage { op: "read fence", source })?;
        raw.map(|r| decode_fence(&r)).transpose()
    }
}

impl FencedStore for RocksFence {
    fn resource(&self) -> &str {
        &self.resource
    }

    fn apply(&self, lock: &LockId, token: FencingToken, mutations: &[Mutation<'_>]) -> Result<Accepted, FenceError> {
        let fkey = fence_key(lock);
        let _serialized = self.stripe(&fkey);
        let accepted = admit(&self.resource, lock, token, self.read_fence(&fkey)?)?;

        let mut batch = WriteBatch::default();
        if accepted.raised() {
            batch.put(&fkey, encode_fence(token));
        }
        for m in mutations {
            match *m {
                Mutation::Put { key, value } => batch.put(data_key(key), encode_data(token, value)),
                Mutation::Delete { key } => batch.delete(data_key(key)),
            }
        }
        if !batch.is_empty() {
            // WriteOptions is not Sync, so it cannot live in the shared store; it is
            // a small allocation next to an fsync.
            let mut sync = WriteOptions::default();
            sync.set_sync(true);
            self.db.write_opt(batch, &sync).map_err(|source| FenceError::Storage { op: "write", source })?;
        }
        Ok(accepted)
    }

    fn highest(&self, lock: &LockId) -> Result<Option<FencingToken>, FenceError> {
        self.read_fence(&fence_key(lock))
    }

    fn read(&self, key: &[u8]) -> Result<Option<Stored>, FenceError> {
        let raw = self.db.get_pinned(data_key(key)).map_err(|source| FenceError::Storage { op: "read", source })?;
        raw.map(|r| decode_data(&r)).transpose()
    }
}
