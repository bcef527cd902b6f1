//! The Raft log and its metadata in RocksDB (`RaftLogStorage`).
//!
//! Durability rule: a vote and every appended entry are written with a synced write
//! before openraft hears that they are durable. A leader counts its own append towards
//! the quorum, and a voter must never forget a vote it granted: acknowledging either
//! before the fsync could lose a committed entry or elect two leaders in one term after
//! a power cut.

use std::fmt;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use openraft::storage::{RaftLogReader, RaftLogStorage};
use openraft::{LogState, OptionalSend};
use rocksdb::{Direction, IteratorMode, WriteBatch};
use tracing::debug;

use crate::rocks::{cf, decode, encode, io_err, synced, Db, CF_LOGS, CF_META};
use crate::stages::Stages;
use crate::types::{Entry, IoFlushed, LogId, TypeConfig, Vote};

const KEY_VOTE: &[u8] = b"vote";
const KEY_COMMITTED: &[u8] = b"committed";
const KEY_LAST_PURGED: &[u8] = b"last_purged";

/// The log of one node. Cheap to clone: clones share the database (openraft reads
/// through a clone while it appends through the original).
#[derive(Clone)]
pub struct LogStore {
    db: Arc<Db>,
    /// Where each append's start and end are marked (`crate::stages`).
    stages: Arc<Stages>,
}

impl fmt::Debug for LogStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogStore").finish_non_exhaustive()
    }
}

fn key(index: u64) -> [u8; 8] {
    // Big endian so that RocksDB's byte order is log order.
    index.to_be_bytes()
}

fn index_of_key(k: &[u8]) -> io::Result<u64> {
    let arr: [u8; 8] = k.try_into().map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "log key is not 8 bytes"))?;
    Ok(u64::from_be_bytes(arr))
}

impl LogStore {
    /// A log store on a database opened with [`crate::rocks::open_db`].
    pub fn new(db: Arc<Db>) -> Self {
        LogStore { db, stages: Arc::default() }
    }

    /// This store, marking its appends in `stages` (the node's).
    pub fn marking(self, stages: Arc<Stages>) -> Self {
        LogStore { stages, ..self }
    }

    fn get_meta<T: serde::de::DeserializeOwned>(&self, k: &[u8]) -> io::Result<Option<T>> {
        match self.db.get_cf(cf(&self.db, CF_META), k).map_err(io_err)? {
            Some(bytes) => Ok(Some(decode(&bytes)?)),
            None => Ok(None),
        }
    }

    fn last_entry(&self) -> io::Result<Option<Entry>> {
        match self.db.iterator_cf(cf(&self.db, CF_LOGS), IteratorMode::End).next() {
            Some(item) => {
                let (_, v) = item.map_err(io_err)?;
                Ok(Some(decode(&v)?))
            }
            None => Ok(None),
        }
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + fmt::Debug + OptionalSend>(&mut self, range: RB) -> Result<Vec<Entry>, io::Error> {
        let start = match range.start_bound() {
            Bound::Included(i) => *i,
            Bound::Excluded(i) => i.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let mut out = Vec::new();
        let iter = self.db.iterator_cf(cf(&self.db, CF_LOGS), IteratorMode::From(&key(start), Direction::Forward));
        for item in iter {
            let (k, v) = item.map_err(io_err)?;
            let index = index_of_key(&k)?;
            if !range.contains(&index) {
                break;
            }
            let entry: Entry = decode(&v)?;
            if entry.log_id.index != index {
                return Err(io::Error::new(io::ErrorKind::InvalidData, format!("log key {index} holds entry {}", entry.log_id)));
            }
            out.push(entry);
        }
        Ok(out)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        self.get_meta(KEY_VOTE)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, io::Error> {
        let last_purged: Option<LogId> = self.get_meta(KEY_LAST_PURGED)?;
        let last = self.last_entry()?.map(|e| e.log_id).or(last_purged);
        Ok(LogState { last_purged_log_id: last_purged, last_log_id: last })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        let started = std::time::Instant::now();
        self.db.put_cf_opt(cf(&self.db, CF_META), KEY_VOTE, encode(vote)?, &synced()).map_err(io_err)?;
        metrics::histogram!(holdfast_core::metric_names::RAFT_FSYNC).record(started.elapsed().as_secs_f64());
        debug!(vote = %vote, "vote saved (synced)");
        Ok(())
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        // Not synced: the committed pointer only lets a restart re-apply sooner. The WAL
        // is ordered, so a committed id that survives never points past entries that did
        // not, and losing the newest value merely means waiting for the cluster to
        // re-establish it (`RaftNode::wait_for_recovery`).
        self.db.put_cf(cf(&self.db, CF_META), KEY_COMMITTED, encode(&committed)?).map_err(io_err)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        Ok(self.get_meta::<Option<LogId>>(KEY_COMMITTED)?.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: IoFlushed) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let logs = cf(&self.db, CF_LOGS);
        let mut batch = WriteBatch::default();
        let mut indexes = Vec::new();
        for entry in entries {
            batch.put_cf(logs, key(entry.log_id.index), encode(&entry)?);
            indexes.push(entry.log_id.index);
        }
        let last = indexes.last();
        // Synced before the callback: openraft counts this node's copy towards the quorum
        // as soon as the callback fires.
        let started = std::time::Instant::now();
        let res = self.db.write_opt(batch, &synced()).map_err(io_err);
        let ended = std::time::Instant::now();
        metrics::histogram!(holdfast_core::metric_names::RAFT_FSYNC).record(ended.duration_since(started).as_secs_f64());
        self.stages.appended(&indexes, started, ended);
        debug!(last_index = ?last, ok = res.is_ok(), "entries appended (synced)");
        match res {
            Ok(()) => {
                callback.io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.io_completed(Err(io::Error::new(e.kind(), e.to_string())));
                Err(e)
            }
        }
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        let from = last_log_id.as_ref().map_or(0, |l| l.index + 1);
        debug!(from, "truncating log");
        let mut batch = WriteBatch::default();
        batch.delete_range_cf(cf(&self.db, CF_LOGS), key(from), key(u64::MAX));
        // u64::MAX itself is outside the half-open range; no real log gets there.
        self.db.write_opt(batch, &synced()).map_err(io_err)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        debug!(upto = %log_id, "purging log");
        // One batch: the last-purged marker and the deletion land together, so a reader
        // never sees a hole that the marker does not explain.
        let mut batch = WriteBatch::default();
        batch.put_cf(cf(&self.db, CF_META), KEY_LAST_PURGED, encode(&log_id)?);
        batch.delete_range_cf(cf(&self.db, CF_LOGS), key(0), key(log_id.index + 1));
        self.db.write_opt(batch, &synced()).map_err(io_err)
    }
}
