//! The state machine side of openraft (`RaftStateMachine`), generic over the application
//! state through [`ReplicatedState`].
//!
//! The application state lives in memory. What is persisted is the latest snapshot (the
//! state's bytes together with the last applied log id and membership it covers), with a
//! synced write, before openraft may purge the logs it covers. On restart the snapshot
//! is restored and openraft re-applies the log after it (up to the persisted committed
//! index at once, the rest once the cluster re-establishes its commit). A separately
//! persisted "last applied" would be wrong here: it would claim state that memory lost.

use std::fmt;
use std::io;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};
use std::time::Duration;

use futures_util::{Stream, TryStreamExt};
use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine};
use openraft::OptionalSend;
use rocksdb::DB;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tracing::{debug, info};

use crate::rocks::{cf, decode, encode, io_err, synced, Db, CF_SM};
use crate::stages::Stages;
use crate::types::{EntryPayload, EntryResponder, LogId, Response, Snapshot, SnapshotData, SnapshotMeta, StoredMembership, TypeConfig};

const KEY_SNAPSHOT: &[u8] = b"snapshot";

/// The application's replicated state (the lock table, the registry).
pub trait ReplicatedState: Send + Sync + 'static {
    /// Applies one committed command and returns the response for its proposer.
    /// Deterministic: no clock, no randomness, no I/O — every replica computes the same.
    ///
    /// `Err` only for a command this build cannot read (a newer release wrote it): the
    /// node then stops on a fatal storage error instead of skipping it, so replicas of
    /// different versions never diverge — the old one refuses to go on. A command that
    /// is read and refused by the state's rules is an `Ok` response.
    fn apply(&mut self, log_index: u64, payload: &[u8]) -> io::Result<Vec<u8>>;

    /// Serializes the whole state. Versioning the format is the application's job.
    fn snapshot(&self) -> Vec<u8>;

    /// Replaces the whole state with a snapshot made by [`ReplicatedState::snapshot`].
    fn restore(&mut self, data: &[u8]) -> io::Result<()>;
}

/// The error an application's `apply` returns for a committed entry it cannot read
/// (`what` names the state: "cell", "registry"). Logged here, once, as what it is: this
/// node stops rather than skip an entry its peers apply.
pub fn undecodable(what: &str, log_index: u64, e: &dyn std::fmt::Display) -> io::Error {
    tracing::error!(log_index, error = %e, "a committed {what} entry this release cannot read (written by a newer one?): this node stops rather than diverge");
    io::Error::new(io::ErrorKind::InvalidData, format!("committed {what} entry {log_index} cannot be read by this release: {e}"))
}

/// A read handle on the applied state, for the server that runs on top.
///
/// Reads see every entry applied so far on this node; for a linearizable read, first get
/// a read index from the leader (`raft.ensure_linearizable()`), then wait until it is
/// applied here ([`StateHandle::wait_applied`]).
pub struct StateHandle<S> {
    state: Arc<RwLock<S>>,
    applied: watch::Receiver<Option<u64>>,
    stages: Arc<Stages>,
}

impl<S> Clone for StateHandle<S> {
    fn clone(&self) -> Self {
        StateHandle { state: self.state.clone(), applied: self.applied.clone(), stages: self.stages.clone() }
    }
}

impl<S> fmt::Debug for StateHandle<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateHandle").field("applied", &*self.applied.borrow()).finish_non_exhaustive()
    }
}

impl<S: ReplicatedState> StateHandle<S> {
    /// The stage marks of this node's writes (`crate::stages`).
    pub fn stages(&self) -> &Stages {
        &self.stages
    }

    /// Runs `f` on the state under a read lock. Keep `f` short: applying waits for it.
    pub fn read<T>(&self, f: impl FnOnce(&S) -> T) -> T {
        f(&read_lock(&self.state))
    }

    /// The index of the last applied entry, `None` before the first one.
    pub fn last_applied(&self) -> Option<u64> {
        *self.applied.borrow()
    }

    /// A watch of the last applied index; it changes after each applied batch.
    pub fn applied_watch(&self) -> watch::Receiver<Option<u64>> {
        self.applied.clone()
    }

    /// Waits until the entry at `index` has been applied on this node.
    pub async fn wait_applied(&self, index: u64, timeout: Duration) -> Result<(), WaitAppliedError> {
        let mut rx = self.applied.clone();
        let fut = async move { rx.wait_for(|a| a.is_some_and(|a| a >= index)).await.map(|_| ()) };
        match tokio::time::timeout(timeout, fut).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(WaitAppliedError::Stopped),
            Err(_) => Err(WaitAppliedError::Timeout { index, timeout }),
        }
    }
}

/// Why [`StateHandle::wait_applied`] returned without the entry applied.
#[derive(Debug, thiserror::Error)]
pub enum WaitAppliedError {
    #[error("entry {index} not applied within {timeout:?}")]
    Timeout { index: u64, timeout: Duration },
    #[error("the state machine stopped")]
    Stopped,
}

fn read_lock<S>(l: &RwLock<S>) -> RwLockReadGuard<'_, S> {
    // A poisoned lock means `apply` panicked half-way: the state may be torn. Refuse to
    // serve it.
    l.read().expect("replicated state lock poisoned by a panic in apply")
}

/// The persisted form of a snapshot (versioned by `rocks::encode`).
#[derive(Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta,
    data: SnapshotData,
}

/// openraft's state machine over the application state `S`.
pub struct StateMachineStore<S> {
    db: Arc<Db>,
    state: Arc<RwLock<S>>,
    applied_tx: watch::Sender<Option<u64>>,
    last_applied: Option<LogId>,
    last_membership: StoredMembership,
    /// Serializes "compare with the stored snapshot, then replace it".
    snapshot_write: Arc<Mutex<()>>,
    /// Where each apply's start and end are marked (`crate::stages`).
    stages: Arc<Stages>,
}

impl<S> fmt::Debug for StateMachineStore<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateMachineStore").field("last_applied", &self.last_applied).field("last_membership", &self.last_membership).finish_non_exhaustive()
    }
}

impl<S: ReplicatedState> StateMachineStore<S> {
    /// Opens the state machine on `db`, starting from `initial` (the empty state) and
    /// restoring the persisted snapshot if there is one.
    pub fn open(db: Arc<Db>, mut initial: S) -> io::Result<Self> {
        let stored = read_snapshot(&db)?;
        let (last_applied, last_membership) = match &stored {
            Some(s) => {
                initial.restore(&s.data)?;
                info!(last_log_id = ?s.meta.last_log_id, bytes = s.data.len(), "state restored from snapshot");
                (s.meta.last_log_id, s.meta.last_membership.clone())
            }
            None => (None, StoredMembership::default()),
        };
        let (applied_tx, _) = watch::channel(last_applied.as_ref().map(|l| l.index));
        Ok(StateMachineStore {
            db,
            state: Arc::new(RwLock::new(initial)),
            applied_tx,
            last_applied,
            last_membership,
            snapshot_write: Arc::new(Mutex::new(())),
            stages: Arc::default(),
        })
    }

    /// A read handle on the state; stays valid for the life of the node.
    pub fn handle(&self) -> StateHandle<S> {
        StateHandle { state: self.state.clone(), applied: self.applied_tx.subscribe(), stages: self.stages.clone() }
    }

    /// The stage marks of this node (its log store marks appends in them too).
    pub fn stages(&self) -> Arc<Stages> {
        self.stages.clone()
    }

    /// The state as of the last applied entry, with that entry's id and the membership
    /// as of it. Read on the state machine's task (`Raft::with_state_machine`), where
    /// nothing is applied meanwhile: the three agree.
    pub(crate) fn capture(&self) -> (Option<LogId>, StoredMembership, Vec<u8>) {
        (self.last_applied, self.last_membership.clone(), read_lock(&self.state).snapshot())
    }

    fn write_lock(&self) -> std::sync::RwLockWriteGuard<'_, S> {
        self.state.write().expect("replicated state lock poisoned by a panic in apply")
    }
}

fn read_snapshot(db: &DB) -> io::Result<Option<StoredSnapshot>> {
    match db.get_cf(cf(db, CF_SM), KEY_SNAPSHOT).map_err(io_err)? {
        Some(bytes) => Ok(Some(decode(&bytes)?)),
        None => Ok(None),
    }
}

/// The snapshot a closed node's directory holds, if any (a recovery reads it: `recover.rs`).
pub(crate) fn read_stored_snapshot(db: &DB) -> io::Result<Option<(SnapshotMeta, SnapshotData)>> {
    Ok(read_snapshot(db)?.map(|s| (s.meta, s.data)))
}

/// Writes the snapshot of a new directory (synced): a recovered member's whole state.
pub(crate) fn write_stored_snapshot(db: &DB, meta: SnapshotMeta, data: SnapshotData) -> io::Result<()> {
    db.put_cf_opt(cf(db, CF_SM), KEY_SNAPSHOT, encode(&StoredSnapshot { meta, data })?, &synced()).map_err(io_err)
}

/// Persists `snap` unless a snapshot at least as new is already stored. Synced: once this
/// returns, openraft may purge the logs the snapshot covers.
fn persist_snapshot(db: &DB, guard: &Mutex<()>, snap: &StoredSnapshot) -> io::Result<bool> {
    let _g = guard.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(cur) = read_snapshot(db)? {
        if cur.meta.last_log_id >= snap.meta.last_log_id {
            return Ok(false);
        }
    }
    db.put_cf_opt(cf(db, CF_SM), KEY_SNAPSHOT, encode(snap)?, &synced()).map_err(io_err)?;
    Ok(true)
}

/// Builds a snapshot from the state captured when openraft asked for a builder.
pub struct SnapshotBuilder {
    db: Arc<Db>,
    snapshot_write: Arc<Mutex<()>>,
    meta: SnapshotMeta,
    data: SnapshotData,
}

impl fmt::Debug for SnapshotBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SnapshotBuilder").field("meta", &self.meta).finish_non_exhaustive()
    }
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    type SnapshotData = SnapshotData;

    async fn build_snapshot(&mut self) -> Result<Snapshot, io::Error> {
        let stored = StoredSnapshot { meta: self.meta.clone(), data: std::mem::take(&mut self.data) };
        let db = self.db.clone();
        let guard = self.snapshot_write.clone();
        // fsync off the async threads.
        let stored = db
            .blocking(move |db| {
                let written = persist_snapshot(db, &guard, &stored)?;
                Ok::<_, io::Error>((stored, written))
            })
            .await??;
        let (stored, written) = stored;
        info!(last_log_id = ?stored.meta.last_log_id, bytes = stored.data.len(), written, "snapshot built");
        Ok(Snapshot { meta: stored.meta, snapshot: stored.data })
    }
}

impl<S: ReplicatedState> RaftStateMachine<TypeConfig> for StateMachineStore<S> {
    type SnapshotData = SnapshotData;
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        Ok((self.last_applied, self.last_membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder, io::Error>> + Unpin + OptionalSend,
    {
        while let Some((entry, responder)) = entries.try_next().await? {
            let index = entry.log_id.index;
            let response = match entry.payload {
                EntryPayload::Blank => Response::default(),
                EntryPayload::Normal(req) => {
                    // An unreadable entry stops this node (openraft's fatal error,
                    // then `Serving`'s exit): it must not apply a different history.
                    let started = std::time::Instant::now();
                    let payload = self.write_lock().apply(index, &req.payload)?;
                    self.stages.applied(index, started, std::time::Instant::now());
                    Response { payload }
                }
                EntryPayload::Membership(m) => {
                    self.last_membership = StoredMembership::new(Some(entry.log_id), m);
                    Response::default()
                }
            };
            self.last_applied = Some(entry.log_id);
            self.applied_tx.send_replace(Some(index));
            if let Some(r) = responder {
                r.send(response);
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        // Captured here, on the state machine task, so that it matches `last_applied`
        // exactly; building then runs concurrently with further applies.
        let data = read_lock(&self.state).snapshot();
        debug!(last_applied = ?self.last_applied, bytes = data.len(), "state captured for a snapshot");
        SnapshotBuilder {
            db: self.db.clone(),
            snapshot_write: self.snapshot_write.clone(),
            meta: SnapshotMeta { last_log_id: self.last_applied, last_membership: self.last_membership.clone() },
            data,
        }
    }

    async fn install_snapshot(&mut self, meta: &SnapshotMeta, snapshot: SnapshotData) -> Result<(), io::Error> {
        let stored = StoredSnapshot { meta: meta.clone(), data: snapshot };
        // Persist first: should we crash after, the restart restores this snapshot, which
        // is what openraft now believes (it purges the logs it covers).
        let db = self.db.clone();
        let guard = self.snapshot_write.clone();
        let stored = db.blocking(move |db| persist_snapshot(db, &guard, &stored).map(|_| stored)).await??;
        self.write_lock().restore(&stored.data)?;
        self.last_applied = meta.last_log_id;
        self.last_membership = meta.last_membership.clone();
        self.applied_tx.send_replace(meta.last_log_id.as_ref().map(|l| l.index));
        info!(last_log_id = ?meta.last_log_id, bytes = stored.data.len(), "snapshot installed");
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, io::Error> {
        let db = self.db.clone();
        let stored = db.blocking(|db| read_snapshot(db)).await??;
        Ok(stored.map(|s| Snapshot { meta: s.meta, snapshot: s.data }))
    }
}
