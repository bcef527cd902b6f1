//! The cell's replicated state as the Raft substrate sees it: the pure lock table plus
//! the hooks that the server needs to see every apply, in log order, as it happens.
//!
//! The lock table stays pure. The hooks are glue: the slot of the leader's current term
//! ([`LeaderTerm`], `term.rs`: its clock, volatile table, wake-ups and ownership lease,
//! updated in the same critical section as the state, so a term and the state it was
//! built from never disagree), what every node remembers of when it applied checkpoints
//! and grants ([`CheckpointArrivals`]), and the broadcast that feeds Watch streams. None
//! of them can change the replicated state.
//!
//! Every apply holds the state's write lock while it takes the term's; so nothing may
//! read the state while it holds the term: [`Hooks::door`] hands out `&mut LeaderTerm`
//! only, and `term.rs` has no way to reach the state.

use crate::clock::CheckpointArrivals;
pub use crate::term::WaitResult;
use crate::term::{LeaderTerm, WaiterKey};
use holdfast_cell_state::{Applied, CellState, Command, Entry, Event, EventKind};
use holdfast_core::{Epoch, ErrorCode, Seq, ShardKey};
use holdfast_core::{RequestId, SessionId};
use holdfast_raft::ReplicatedState;
use holdfast_rpc::status::status;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::{broadcast, oneshot};
use tokio::time::Instant;
use tonic::Status;

/// A wake-up armed for one call in one term; dropping it removes the wake-up (unless
/// another call for the same request still waits on its own).
#[derive(Debug)]
pub struct Armed {
    hooks: Arc<Hooks>,
    term: u64,
    key: WaiterKey,
    rx: Option<oneshot::Receiver<WaitResult>>,
}

impl Armed {
    /// The wake-up, to wait on (once).
    pub fn take(&mut self) -> oneshot::Receiver<WaitResult> {
        self.rx.take().expect("a wake-up is taken once")
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        // Close our receiver first, so disarming sees this sender closed.
        drop(self.rx.take());
        let _ = self.hooks.door_in(self.term, |t| t.disarm_closed(&self.key));
    }
}

/// Shared between the state machine (which feeds them) and the server (which reads them).
#[derive(Debug)]
pub struct Hooks {
    /// The leader's state for its current term; `None` on a follower, and on a leader
    /// until its duties have built it.
    term: Mutex<Option<LeaderTerm>>,
    /// When this node applied each session's latest checkpoint and each hold's grant
    /// (every node keeps it, so whichever is elected next resumes countdowns from there).
    /// Never taken together with `term`.
    arrivals: Mutex<CheckpointArrivals>,
    events: broadcast::Sender<Event>,
}

impl Hooks {
    pub fn new() -> Arc<Hooks> {
        let (events, _) = broadcast::channel(4096);
        Arc::new(Hooks { term: Mutex::new(None), arrivals: Mutex::new(CheckpointArrivals::default()), events })
    }

    fn slot(&self) -> MutexGuard<'_, Option<LeaderTerm>> {
        self.term.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The one door to the leader's term: `f` runs on it, or `UNAVAILABLE` when this
    /// node has no term (not leading, or just elected and still building it).
    pub fn door<T>(&self, f: impl FnOnce(&mut LeaderTerm) -> T) -> Result<T, Status> {
        self.slot().as_mut().map(f).ok_or_else(no_term)
    }

    /// [`Hooks::door`], only if the current term is term `number` (a duty or a call
    /// that began in it); `UNAVAILABLE` otherwise.
    pub fn door_in<T>(&self, number: u64, f: impl FnOnce(&mut LeaderTerm) -> T) -> Result<T, Status> {
        self.slot().as_mut().filter(|t| t.number() == number).map(f).ok_or_else(no_term)
    }

    /// The number of the current term, if this node has one.
    pub fn term_number(&self) -> Option<u64> {
        self.slot().as_ref().map(LeaderTerm::number)
    }

    /// Builds and installs the term of a leader elected in term `number` from `state`,
    /// the applied state it must be built from (the caller holds its read lock, which
    /// every apply holds for writing: no entry falls between the state and the term's
    /// first `on_committed`). An earlier term still installed ends first.
    pub fn begin_term(&self, number: u64, state: &CellState, checkpoint_interval: std::time::Duration, margin: Option<std::time::Duration>) {
        let now = Instant::now();
        let term = {
            let arrivals = self.arrivals.lock().unwrap_or_else(|e| e.into_inner());
            LeaderTerm::begin(number, now, state, checkpoint_interval, &arrivals, margin)
        };
        let old = self.slot().replace(term);
        drop(old);
    }

    /// Ends term `number` if it is the current one: its waiting calls are answered
    /// ([`WaitResult::Deposed`]), its volatile locks and its ownership lease are gone.
    pub fn end_term(&self, number: u64) {
        let mut slot = self.slot();
        if slot.as_ref().is_some_and(|t| t.number() == number) {
            let ended = slot.take();
            drop(slot);
            drop(ended);
        }
    }

    /// Arms a wake-up for a queued acquire in the current term. Arm it *before*
    /// proposing the acquire, so a grant that commits before the proposer hears
    /// "queued" is not missed. Dropped from the table however the call ends.
    pub fn arm_guarded(self: &Arc<Self>, session: SessionId, request_id: RequestId) -> Result<Armed, Status> {
        let key = (session, request_id);
        let (term, rx) = self.door(|t| (t.number(), t.arm(key.clone())))?;
        Ok(Armed { hooks: self.clone(), term, key, rx: Some(rx) })
    }

    /// Wake-ups armed and not yet fired or dropped.
    pub fn armed(&self) -> usize {
        self.slot().as_ref().map_or(0, LeaderTerm::armed)
    }

    /// A stream of every event applied from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }

    /// Applies a lock command of an efficiency namespace to the leader's volatile table
    /// (no log write); the timers, the waiting calls and the watchers see it as they see
    /// a committed entry. `None` while no term is built (not leading).
    pub fn apply_volatile(&self, entry: &Entry) -> Option<Applied> {
        let mut slot = self.slot();
        let term = slot.as_mut()?;
        let applied = term.apply_volatile(Instant::now(), entry);
        // Sent under the term's lock, so events reach watchers in revision order.
        self.broadcast(&applied.events);
        Some(applied)
    }

    /// Reads the volatile table; `None` while no term is built.
    pub fn read_volatile<T>(&self, f: impl FnOnce(&CellState) -> T) -> Option<T> {
        self.slot().as_ref().map(|t| f(t.volatile()))
    }

    /// Hands a committed `ReserveTokens` to the volatile table (see its
    /// `take_reservation`). Returns whether it was taken.
    pub fn take_reservation(&self, shard: &ShardKey, epoch: Epoch, from: Seq, through: Seq) -> bool {
        self.door(|t| t.volatile_mut().take_reservation(shard, epoch, from, through)).unwrap_or(false)
    }

    /// Follows one committed entry, under the state's write lock: the term (if any),
    /// then every node's arrivals, then the watchers.
    fn committed(&self, entry: &Entry, applied: &Applied, state: &CellState) {
        let now = Instant::now();
        let mut slot = self.slot();
        let mirrored = slot.as_mut().map(|t| t.on_committed(now, entry, applied, state)).unwrap_or_default();
        self.broadcast(&applied.events);
        self.broadcast(&mirrored);
        drop(slot);
        self.arrivals.lock().unwrap_or_else(|e| e.into_inner()).on_applied(now, &entry.cmd, applied);
    }

    /// A snapshot replaced the state: a term built from the old one is wrong now (the
    /// leader's duties build a new one), and what this node saw no longer describes it.
    fn replaced(&self) {
        let ended = self.slot().take();
        drop(ended);
        self.arrivals.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    fn broadcast(&self, events: &[Event]) {
        for ev in events {
            // No receivers is fine: nobody watches.
            let _ = self.events.send(ev.clone());
        }
    }
}

/// Between an election and the leader building its term, or after it stopped leading:
/// the caller retries and finds the leader.
fn no_term() -> Status {
    status(ErrorCode::Unavailable, "this node is not leading (or was just elected and is still starting); retry")
}

/// The lock table plus its hooks.
#[derive(Debug)]
pub struct CellMachine {
    state: CellState,
    hooks: Arc<Hooks>,
    /// A planted bug (`unsafe_plant = "token-reuse"`, debug builds only).
    #[cfg_attr(not(debug_assertions), allow(dead_code))]
    planted: bool,
}

impl CellMachine {
    pub fn new(hooks: Arc<Hooks>) -> CellMachine {
        CellMachine { state: CellState::new(), hooks, planted: false }
    }

    /// A machine with the planted token-reuse bug (see
    /// [`CellState::plant_token_reuse`]); debug builds only.
    #[cfg(debug_assertions)]
    pub fn planted(hooks: Arc<Hooks>) -> CellMachine {
        let mut m = CellMachine::new(hooks);
        m.planted = true;
        m.state.plant_token_reuse();
        m
    }

    pub fn state(&self) -> &CellState {
        &self.state
    }
}

/// The moments a replica applied each change of a lock's holders and queue, as debug
/// events: the simulation reads them (drills/sim/src/stamps.rs) and its checker holds
/// them against each other and against the workers' calls (docs/simulation.md). The
/// revision orders them as the log did, whichever replica's line comes first; the
/// epoch is the one the shard was at when its queue changed. `sealed` is the shard an
/// adoption sealed first, with the epoch it left: its waiters left at that epoch,
/// not at the one the state now shows.
fn stamp(state: &CellState, sealed: Option<&(ShardKey, u32)>, events: &[Event]) {
    for ev in events {
        let (shard, lock, session, revision) = (&ev.shard, &ev.name, ev.session.0, ev.revision.0);
        let epoch = || match sealed {
            Some((key, epoch)) if key == shard => *epoch,
            _ => epoch_of(state, shard),
        };
        match ev.kind {
            EventKind::Acquired { token, .. } => tracing::debug!(%shard, %lock, token = token.0, session, revision, "hold began"),
            EventKind::Ended { token, reason } => tracing::debug!(%shard, %lock, token = token.0, session, %reason, "hold ended"),
            EventKind::Queued { .. } => tracing::debug!(%shard, %lock, session, revision, epoch = epoch(), "waiter queued"),
            EventKind::Dequeued { .. } => tracing::debug!(%shard, %lock, session, revision, epoch = epoch(), "waiter left"),
        }
    }
}

/// Read only when the event is enabled (tracing evaluates fields lazily).
fn epoch_of(state: &CellState, shard: &ShardKey) -> u32 {
    state.shard_epoch(shard).map_or(0, |e| e.0)
}

impl ReplicatedState for CellMachine {
    fn apply(&mut self, log_index: u64, payload: &[u8]) -> io::Result<Vec<u8>> {
        let entry = Entry::decode(payload).map_err(|e| holdfast_raft::undecodable("cell", log_index, &e))?;
        // An adoption at a new epoch seals the old one first, in the same apply.
        let sealed = match &entry.cmd {
            Command::AdoptShard { shard, .. } => self.state.shard_epoch(shard).map(|e| (shard.clone(), e.0)),
            _ => None,
        };
        // A seal (or an adoption that seals first) ends the sessions homed in the shard.
        let homed = match &entry.cmd {
            Command::SealShard { shard, .. } | Command::AdoptShard { shard, .. } => self.state.sessions_homed_in(shard),
            _ => Vec::new(),
        };
        let applied = self.state.apply(&entry);
        if let (Command::CloseSession { session } | Command::ExpireSession { session }, Ok(_)) = (&entry.cmd, &applied.result) {
            // The moment a replica applied a session's end (drills/sim/src/stamps.rs).
            tracing::debug!(session = session.0, "session ended");
        }
        for session in homed.into_iter().filter(|s| self.state.session(*s).is_none()) {
            tracing::debug!(session = session.0, "session ended");
        }
        stamp(&self.state, sealed.as_ref(), &applied.events);
        self.hooks.committed(&entry, &applied, &self.state);
        Ok(applied.encode())
    }

    fn snapshot(&self) -> Vec<u8> {
        self.state.snapshot()
    }

    fn restore(&mut self, data: &[u8]) -> io::Result<()> {
        self.state = CellState::restore(data).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        #[cfg(debug_assertions)]
        if self.planted {
            self.state.plant_token_reuse();
        }
        self.hooks.replaced();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdfast_cell_state::Command;
    use holdfast_core::SessionId;

    /// Issue #15, item 6: a replica that cannot read a committed entry (a newer
    /// release wrote it) must refuse to go on, not apply it as a no-op while its peers
    /// apply it: `apply` fails, and the Raft node stops on it (`raft/src/sm_store.rs`).
    #[test]
    fn an_entry_of_a_newer_release_stops_the_replica_instead_of_being_skipped() {
        let mut m = CellMachine::new(Hooks::new());
        let mut bytes = Entry::new(0, Command::CloseSession { session: SessionId(1) }).encode();
        assert!(m.apply(1, &bytes).is_ok(), "an entry of this release applies (refused by the rules, but read)");
        bytes[4..6].copy_from_slice(&99u16.to_le_bytes());
        let e = m.apply(2, &bytes).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("cannot be read"), "{e}");
    }
}
