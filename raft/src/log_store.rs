//! The Raft log and its metadata in RocksDB (`RaftLogStorage`).
//!
//! Durability rule: a vote and every appended entry are on disk (fsynced) before
//! openraft hears that they are durable. A leader counts its own append towards the
//! quorum, and a voter must never forget a vote it granted: acknowledging either before
//! the fsync could lose a committed entry or elect two leaders in one term after a
//! power cut.
//!
//! Appends are group-committed off the Raft core's path: `append` writes the entries
//! (visible to readers at once, so the leader replicates them while its own fsync
//! runs) and hands its callback to the node's flusher thread, which syncs the WAL once
//! for every append that arrived meanwhile and only then reports them flushed, in
//! order. A vote and a truncation first wait for the flusher to drain (a barrier), so
//! openraft hears of flushes in the same order as the operations it issued.
//!
//! On the simulation's memory disk there is no WAL to sync and no thread may decide
//! when: an append is reported durable inline while the disk is fast. While the
//! simulation makes it slow, a task of the node's runtime plays the flusher on
//! simulated time (`SimFlusher`).

use std::fmt;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, Weak};
use std::time::Instant;

use openraft::storage::{RaftLogReader, RaftLogStorage};
use openraft::{LogState, OptionalSend};
use rocksdb::{Direction, IteratorMode, WriteBatch};
use tracing::debug;

use crate::rocks::{cf, decode, encode, io_err, synced, Db, MemoryDisk, CF_LOGS, CF_META};
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
    /// The node's flusher thread, which ends when the last clone is dropped; or, on a
    /// simulation's memory disk, which keeps every write and has no WAL to sync, the
    /// simulated one: an append is reported durable inline, on the Raft core's task,
    /// so that no thread outside the simulation decides when (by its task while the
    /// disk is slow).
    flusher: Flusher,
}

/// Who reports appends durable: the node's flusher thread (a real disk), or on a
/// memory disk the simulation's flusher (inline while the disk is fast).
#[derive(Clone)]
enum Flusher {
    Thread(mpsc::Sender<Flush>),
    Memory(Arc<SimFlusher>),
}

/// How the flusher makes written entries durable: RocksDB's WAL sync (a test holds it).
pub(crate) type Sync = Box<dyn Fn(&Db) -> Result<(), String> + Send>;

pub(crate) fn sync_wal(db: &Db) -> Result<(), String> {
    db.flush_wal(true).map_err(|e| e.to_string())
}

/// Work for the flusher thread.
enum Flush {
    /// Entries written (not yet synced) at `written`: report them flushed once synced.
    Appended { callback: IoFlushed, indexes: Vec<u64>, written: Instant, stages: Arc<Stages> },
    /// Answered once everything queued before it is synced and reported.
    Barrier(tokio::sync::oneshot::Sender<io::Result<()>>),
}

/// The flusher: waits for work, takes everything queued, syncs the WAL once for all of
/// it, then reports each append flushed (and each barrier passed) in queue order. It
/// holds the database only while syncing: the database still closes when the node's
/// last handle drops, on that thread, and never at process exit on this one (RocksDB
/// aborts if it closes while the process tears down its statics).
fn flusher(db: std::sync::Weak<Db>, queue: mpsc::Receiver<Flush>, sync: Sync) {
    while let Ok(first) = queue.recv() {
        let mut work = vec![first];
        work.extend(queue.try_iter());
        let started = Instant::now();
        let synced = match db.upgrade() {
            Some(db) => sync(&db),
            None => Err("the log's database is closed".to_owned()),
        };
        let ended = Instant::now();
        metrics::histogram!(holdfast_core::metric_names::RAFT_FSYNC).record(ended.duration_since(started).as_secs_f64());
        report(work, synced, ended);
    }
}

/// Reports each append flushed (and each barrier passed), in queue order, with the
/// outcome of the one sync that covered them all.
fn report(work: Vec<Flush>, synced: Result<(), String>, ended: Instant) {
    let appends = work.iter().filter(|w| matches!(w, Flush::Appended { .. })).count();
    debug!(appends, ok = synced.is_ok(), "log synced");
    for w in work {
        let result = synced.clone().map_err(io::Error::other);
        match w {
            Flush::Appended { callback, indexes, written, stages } => {
                stages.appended(&indexes, written, ended);
                callback.io_completed(result);
            }
            Flush::Barrier(done) => {
                let _ = done.send(result);
            }
        }
    }
}

/// The flusher of a memory disk the simulation made slow: a task of the node's own
/// runtime, started the first time the disk is slow. While the disk is slow, or work
/// queued here is not yet reported (so that reports keep their order), appends and
/// barriers queue here; the task waits out the disk's latency on simulated time, then
/// reports everything queued meanwhile at once, as the flusher thread does.
#[derive(Default)]
struct SimFlusher {
    queue: Mutex<Option<tokio::sync::mpsc::UnboundedSender<Flush>>>,
    /// Queued and not yet reported.
    pending: Arc<AtomicUsize>,
}

impl SimFlusher {
    /// Queues `work` if it must wait (the disk is slow, or earlier work still waits);
    /// gives it back to be done inline otherwise.
    fn queue(&self, db: &Arc<Db>, work: Flush) -> Result<(), Flush> {
        let slow = db.memory_sync_latency().is_some_and(|l| !l.is_zero());
        if !slow && self.pending.load(Ordering::Relaxed) == 0 {
            return Err(work);
        }
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let tx = queue.get_or_insert_with(|| {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            tokio::spawn(sim_flusher(Arc::downgrade(db), rx, self.pending.clone()));
            tx
        });
        self.pending.fetch_add(1, Ordering::Relaxed);
        tx.send(work).map_err(|e| {
            self.pending.fetch_sub(1, Ordering::Relaxed);
            e.0
        })
    }
}

async fn sim_flusher(db: Weak<Db>, mut queue: tokio::sync::mpsc::UnboundedReceiver<Flush>, pending: Arc<AtomicUsize>) {
    while let Some(first) = queue.recv().await {
        let mut work = vec![first];
        while let Ok(w) = queue.try_recv() {
            work.push(w);
        }
        let latency = db.upgrade().and_then(|db| db.memory_sync_latency()).unwrap_or_default();
        tokio::time::sleep(latency).await;
        // The sync is done: what it covered survives a power cut from now on.
        if let Some(db) = db.upgrade() {
            memory_synced(&db, &work);
        }
        let n = work.len();
        report(work, Ok(()), Instant::now());
        pending.fetch_sub(n, Ordering::Relaxed);
    }
}

/// On a memory disk, the appends of `work` are durable now.
fn memory_synced(db: &Db, work: &[Flush]) {
    if let Some(disk) = db.memory() {
        for w in work {
            if let Flush::Appended { indexes, .. } = w {
                disk.synced(indexes);
            }
        }
    }
}

/// After a power cut of a memory disk (the simulation's), drops the log entries that
/// were written and never synced, as a real disk's lost page cache would; and the
/// committed marker, written unsynced (losing it only means waiting for the cluster to
/// establish it again).
fn lose_unsynced(db: &Db) {
    let Some(lost) = db.memory().and_then(MemoryDisk::lost_to_power_cut) else { return };
    let mut batch = WriteBatch::default();
    for index in &lost {
        batch.delete_cf(cf(db, CF_LOGS), key(*index));
    }
    batch.delete_cf(cf(db, CF_META), KEY_COMMITTED);
    if let Err(e) = db.write_opt(batch, &synced()) {
        tracing::error!(error = %e, "could not apply the power cut to the memory disk");
    }
    tracing::info!(lost = lost.len(), first = ?lost.first(), "power cut: log entries never synced are lost");
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
        if db.inline_io() {
            lose_unsynced(&db);
            return LogStore { db, stages: Arc::default(), flusher: Flusher::Memory(Arc::default()) };
        }
        LogStore::syncing_by(db, Box::new(sync_wal))
    }

    /// A log store on a real disk whose WAL syncs are done by `sync` (tests slow or
    /// fail them; production is [`LogStore::new`]).
    pub(crate) fn syncing_by(db: Arc<Db>, sync: Sync) -> Self {
        let (flusher_tx, queue) = mpsc::channel();
        let synced_db = Arc::downgrade(&db);
        std::thread::Builder::new().name("raft-log-flusher".into()).spawn(move || flusher(synced_db, queue, sync)).expect("spawn the log flusher thread");
        LogStore { db, stages: Arc::default(), flusher: Flusher::Thread(flusher_tx) }
    }

    /// Waits until every append queued so far is synced and reported flushed.
    async fn drain(&self) -> io::Result<()> {
        let (done, passed) = tokio::sync::oneshot::channel();
        match &self.flusher {
            Flusher::Thread(flusher) => flusher.send(Flush::Barrier(done)).map_err(|_| io::Error::other("the log flusher has stopped"))?,
            // A memory disk: nothing to wait for unless the simulation's flusher holds
            // reports back.
            Flusher::Memory(sim) => {
                if sim.pending.load(Ordering::Relaxed) == 0 || sim.queue(&self.db, Flush::Barrier(done)).is_err() {
                    return Ok(());
                }
            }
        }
        passed.await.map_err(|_| io::Error::other("the log flusher has stopped"))?
    }

    /// On a memory disk the simulation made slow, a synced write takes its latency.
    async fn memory_sync(&self) {
        if let Some(latency) = self.db.memory_sync_latency().filter(|l| !l.is_zero()) {
            tokio::time::sleep(latency).await;
        }
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

/// Every entry of a closed node's log from index `from` on, in order (a recovery reads
/// them: `recover.rs`).
pub(crate) fn entries_from(db: &Db, from: u64) -> io::Result<Vec<Entry>> {
    let mut out = Vec::new();
    for item in db.iterator_cf(cf(db, CF_LOGS), IteratorMode::From(&key(from), Direction::Forward)) {
        let (k, v) = item.map_err(io_err)?;
        let entry: Entry = decode(&v)?;
        if entry.log_id.index != index_of_key(&k)? {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("log key {} holds entry {}", index_of_key(&k)?, entry.log_id)));
        }
        out.push(entry);
    }
    Ok(out)
}

/// The vote a closed node's log recorded.
pub(crate) fn stored_vote(db: &Db) -> io::Result<Option<Vote>> {
    match db.get_cf(cf(db, CF_META), KEY_VOTE).map_err(io_err)? {
        Some(bytes) => Ok(Some(decode(&bytes)?)),
        None => Ok(None),
    }
}

/// Marks a new node's empty log as starting after `last` (everything up to it is in
/// the snapshot written next to it) with `vote` recorded, in one synced write: a
/// recovered member's log (`recover.rs`).
pub(crate) fn seed(db: &Db, last: LogId, vote: Vote) -> io::Result<()> {
    let mut batch = WriteBatch::default();
    batch.put_cf(cf(db, CF_META), KEY_LAST_PURGED, encode(&last)?);
    batch.put_cf(cf(db, CF_META), KEY_COMMITTED, encode(&Some(last))?);
    batch.put_cf(cf(db, CF_META), KEY_VOTE, encode(&vote)?);
    db.write_opt(batch, &synced()).map_err(io_err)
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
        self.drain().await?;
        let started = std::time::Instant::now();
        self.db.put_cf_opt(cf(&self.db, CF_META), KEY_VOTE, encode(vote)?, &synced()).map_err(io_err)?;
        self.memory_sync().await;
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
        // Written, not synced: readers (replication) see the entries now. The callback
        // fires only once the flusher has synced them: openraft counts this node's copy
        // towards the quorum as soon as it does.
        let written = Instant::now();
        if let Err(e) = self.db.write(batch).map_err(io_err) {
            callback.io_completed(Err(io::Error::new(e.kind(), e.to_string())));
            return Err(e);
        }
        debug!(last_index = ?indexes.last(), "entries written; syncing");
        let flush = Flush::Appended { callback, indexes, written, stages: self.stages.clone() };
        let flusher = match &self.flusher {
            Flusher::Thread(flusher) => flusher,
            Flusher::Memory(sim) => {
                // A memory disk keeps every write, and has no WAL sync to call: reported
                // now, unless the simulation made the disk slow.
                if let Some(disk) = self.db.memory() {
                    disk.written(match &flush {
                        Flush::Appended { indexes, .. } => indexes,
                        Flush::Barrier(_) => &[],
                    });
                }
                if let Err(Flush::Appended { callback, indexes, written, stages }) = sim.queue(&self.db, flush) {
                    // A healthy memory disk syncs at once.
                    if let Some(disk) = self.db.memory() {
                        disk.synced(&indexes);
                    }
                    stages.appended(&indexes, written, Instant::now());
                    callback.io_completed(Ok(()));
                }
                return Ok(());
            }
        };
        if let Err(mpsc::SendError(Flush::Appended { callback, .. })) = flusher.send(flush) {
            callback.io_completed(Err(io::Error::other("the log flusher has stopped")));
            return Err(io::Error::other("the log flusher has stopped"));
        }
        Ok(())
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        let from = last_log_id.as_ref().map_or(0, |l| l.index + 1);
        self.drain().await?;
        debug!(from, "truncating log");
        let mut batch = WriteBatch::default();
        batch.delete_range_cf(cf(&self.db, CF_LOGS), key(from), key(u64::MAX));
        // u64::MAX itself is outside the half-open range; no real log gets there.
        self.db.write_opt(batch, &synced()).map_err(io_err)?;
        if let Some(disk) = self.db.memory() {
            disk.dropped_from(from);
        }
        self.memory_sync().await;
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::EntryPayload;
    use crate::types::LeaderId;
    use std::sync::{Condvar, Mutex};
    use std::time::Duration;

    /// A sync that waits until the test opens the gate, then syncs for real.
    fn gated() -> (Arc<(Mutex<bool>, Condvar)>, Sync) {
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        let g = gate.clone();
        let sync: Sync = Box::new(move |db: &Db| {
            let (open, cv) = &*g;
            let _open = cv.wait_while(open.lock().unwrap(), |open| !*open).unwrap();
            sync_wal(db)
        });
        (gate, sync)
    }

    fn entry(index: u64) -> Entry {
        Entry { log_id: LogId::new(LeaderId { term: 1, node_id: 1 }, index), payload: EntryPayload::Blank }
    }

    /// The durability rule: entries are readable at once (replication may send them),
    /// but openraft hears they are flushed only after the WAL sync; a vote waits for
    /// the appends before it.
    #[tokio::test]
    async fn an_append_is_reported_flushed_only_after_the_sync() {
        let dir = tempfile::tempdir().unwrap();
        let (gate, sync) = gated();
        let mut log = LogStore::syncing_by(crate::rocks::open_db(dir.path(), None).unwrap(), sync);
        let (tx, mut flushed) = <TypeConfig as openraft::type_config::TypeConfigExt>::oneshot();
        log.append([entry(1), entry(2)], IoFlushed::signal(tx)).await.unwrap();
        assert_eq!(log.try_get_log_entries(1..3).await.unwrap().len(), 2, "written entries are readable before the sync");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(flushed.try_recv().is_err(), "reported flushed before the sync");
        let mut vote = log.clone();
        let voted = tokio::spawn(async move { vote.save_vote(&Vote { leader_id: LeaderId { term: 2, node_id: 1 }, committed: false }).await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!voted.is_finished(), "a vote was saved before the appends queued ahead of it were flushed");
        {
            let (open, cv) = &*gate;
            *open.lock().unwrap() = true;
            cv.notify_all();
        }
        tokio::time::timeout(Duration::from_secs(5), flushed).await.expect("flushed after the sync").unwrap().unwrap();
        tokio::time::timeout(Duration::from_secs(5), voted).await.unwrap().unwrap().unwrap();
    }

    /// The simulation's slow disk keeps the same rule on a memory disk: an append is
    /// reported only after the disk's latency, a vote waits for it, and an append
    /// made once the disk is fast again is not reported before the slow one.
    #[tokio::test]
    async fn a_slow_memory_disk_reports_appends_late_and_in_order() {
        let disk = crate::rocks::MemoryDisk::new().unwrap();
        let mut log = LogStore::new(crate::rocks::open_db(std::path::Path::new("/slow"), Some(&disk)).unwrap());
        let flushed = || <TypeConfig as openraft::type_config::TypeConfigExt>::oneshot();
        // Fast: reported inline.
        let (tx, mut fast) = flushed();
        log.append([entry(1)], IoFlushed::signal(tx)).await.unwrap();
        assert!(fast.try_recv().is_ok(), "a fast memory disk reports an append at once");
        // Slow: written (readable) at once, reported after the latency.
        disk.set_sync_latency(Duration::from_millis(300));
        let started = tokio::time::Instant::now();
        let (tx, slow) = flushed();
        log.append([entry(2)], IoFlushed::signal(tx)).await.unwrap();
        assert_eq!(log.try_get_log_entries(1..3).await.unwrap().len(), 2, "written entries are readable before the sync");
        // The flusher task takes the append and starts its slow sync.
        tokio::task::yield_now().await;
        let mut vote = log.clone();
        let voted = tokio::spawn(async move { vote.save_vote(&Vote { leader_id: LeaderId { term: 2, node_id: 1 }, committed: false }).await });
        // Fast again while the slow append waits: the next one queues behind it.
        disk.set_sync_latency(Duration::ZERO);
        let (tx, mut after) = flushed();
        log.append([entry(3)], IoFlushed::signal(tx)).await.unwrap();
        assert!(after.try_recv().is_err(), "an append was reported before one made earlier on the slow disk");
        assert!(!voted.is_finished(), "a vote was saved before the appends queued ahead of it were flushed");
        tokio::time::timeout(Duration::from_secs(5), slow).await.expect("flushed after the latency").unwrap().unwrap();
        assert!(started.elapsed() >= Duration::from_millis(300), "reported after {:?}, before the disk's latency", started.elapsed());
        tokio::time::timeout(Duration::from_secs(5), after).await.expect("the queued append is reported").unwrap().unwrap();
        tokio::time::timeout(Duration::from_secs(5), voted).await.unwrap().unwrap().unwrap();
        // Nothing waits any more: inline again.
        let (tx, mut inline) = flushed();
        log.append([entry(4)], IoFlushed::signal(tx)).await.unwrap();
        assert!(inline.try_recv().is_ok(), "once the queue drained, a fast disk reports at once");
    }
}
