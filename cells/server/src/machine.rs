//! The cell's replicated state as the Raft substrate sees it: the pure lock table plus
//! the hooks that the server needs to see every apply, in log order, as it happens.
//!
//! The lock table stays pure. The hooks are glue: the leader's lease clock (updated in
//! the same critical section as the state, so a clock and the state it was built from
//! never disagree), the open calls of queued acquires (woken by their grant), and the
//! broadcast that feeds Watch streams. None of them can change the replicated state.
//!
//! The leader's volatile table of efficiency namespaces (the lock table's
//! `volatile.rs`) lives here too: lock commands of those namespaces are applied to it
//! instead of being proposed, and the replicated commands it must also see (configs,
//! shards, sessions created and ended) are applied to it right after the log applies
//! them, so the two tables never disagree on who is alive.

use crate::clock::{CheckpointArrivals, LeaseClock};
use holdfast_cell_state::{Applied, CellState, Command, DequeueReason, Entry, Event, EventKind};
use holdfast_core::{Epoch, Seq, ShardKey};
use holdfast_core::{FencingToken, RequestId, SessionId};
use holdfast_raft::ReplicatedState;
use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex};
use tokio::sync::{broadcast, oneshot};
use tokio::time::Instant;

/// A wake-up armed for one call; dropping it removes the wake-up from the table
/// (unless another call for the same request still waits on its own).
#[derive(Debug)]
pub struct Armed {
    hooks: Arc<Hooks>,
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
        self.hooks.disarm_closed(self.key.0, &self.key.1);
    }
}

/// How a queued acquire ended, for the call that is waiting on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitResult {
    Granted(FencingToken),
    Dequeued(DequeueReason),
}

type WaiterKey = (SessionId, RequestId);

/// Shared between the state machine (which fires them) and the server (which arms them).
#[derive(Debug)]
pub struct Hooks {
    /// `Some` only while this node leads and has built its clock.
    pub clock: Mutex<Option<LeaseClock>>,
    /// The volatile table of efficiency namespaces: `Some` only while this node leads
    /// and has built it (with the clock). Locked before `clock` when both are taken.
    pub volatile: Mutex<Option<CellState>>,
    /// When this node applied each session's latest checkpoint (every node keeps it,
    /// so whichever is elected next can resume countdowns from there). Locked after
    /// `clock` when both are taken.
    pub arrivals: Mutex<CheckpointArrivals>,
    /// Ordered: waiters are woken in one order when a node stops (docs/simulation.md).
    waiters: Mutex<BTreeMap<WaiterKey, Vec<oneshot::Sender<WaitResult>>>>,
    events: broadcast::Sender<Event>,
}

impl Hooks {
    pub fn new() -> Arc<Hooks> {
        let (events, _) = broadcast::channel(4096);
        Arc::new(Hooks {
            clock: Mutex::new(None),
            volatile: Mutex::new(None),
            arrivals: Mutex::new(CheckpointArrivals::default()),
            waiters: Mutex::new(BTreeMap::new()),
            events,
        })
    }

    /// [`Hooks::arm`], with the wake-up dropped from the table however the call ends:
    /// granted at once, refused, its proposal failed, or the caller went away.
    pub fn arm_guarded(self: &Arc<Self>, session: SessionId, request_id: RequestId) -> Armed {
        let rx = self.arm(session, request_id.clone());
        Armed { hooks: self.clone(), key: (session, request_id), rx: Some(rx) }
    }

    /// Wake-ups armed and not yet fired or dropped.
    pub fn armed(&self) -> usize {
        self.waiters.lock().expect("waiters lock").values().map(Vec::len).sum()
    }

    /// Arms a wake-up for a queued acquire. Arm it *before* proposing the acquire, so
    /// a grant that commits before the proposer hears "queued" is not missed.
    pub fn arm(&self, session: SessionId, request_id: RequestId) -> oneshot::Receiver<WaitResult> {
        let (tx, rx) = oneshot::channel();
        self.waiters.lock().expect("waiters lock").entry((session, request_id)).or_default().push(tx);
        rx
    }

    /// Drops wake-ups whose calls went away.
    pub fn disarm_closed(&self, session: SessionId, request_id: &RequestId) {
        let mut w = self.waiters.lock().expect("waiters lock");
        let key = (session, request_id.clone());
        if let Some(list) = w.get_mut(&key) {
            list.retain(|tx| !tx.is_closed());
            if list.is_empty() {
                w.remove(&key);
            }
        }
    }

    /// A stream of every event applied from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }

    /// Applies a lock command of an efficiency namespace to the volatile table; the
    /// leader's timers, the waiting calls and the watchers see it as they see a
    /// committed entry. `None` while no volatile table is built (not leading).
    pub fn apply_volatile(&self, entry: &Entry) -> Option<Applied> {
        let mut guard = self.volatile.lock().expect("volatile lock");
        let table = guard.as_mut()?;
        let applied = table.apply(entry);
        if let Some(clock) = self.clock.lock().expect("clock lock").as_mut() {
            clock.on_applied(Instant::now(), &entry.cmd, &applied, table);
        }
        // Fired under the table's lock, so events reach watchers in revision order.
        self.fire(&applied.events);
        Some(applied)
    }

    /// Drops the volatile table when this node stops leading (or its state was
    /// replaced). Its waiting calls are answered at once ("outcome unknown, retry",
    /// which finds the new leader) instead of at the end of their waits: nobody is
    /// left to grant them here.
    pub fn drop_volatile(&self) {
        let Some(table) = self.volatile.lock().expect("volatile lock").take() else { return };
        let mut waiters = self.waiters.lock().expect("waiters lock");
        for (_, _, session, request_id) in table.waiters() {
            // Dropping the senders wakes the calls with "closed".
            waiters.remove(&(session, request_id.clone()));
        }
    }

    /// Reads the volatile table; `None` while none is built.
    pub fn read_volatile<T>(&self, f: impl FnOnce(&CellState) -> T) -> Option<T> {
        self.volatile.lock().expect("volatile lock").as_ref().map(f)
    }

    /// Hands a committed `ReserveTokens` to the volatile table (see its
    /// `take_reservation`). Returns whether it was taken.
    pub fn take_reservation(&self, shard: &ShardKey, epoch: Epoch, from: Seq, through: Seq) -> bool {
        self.volatile.lock().expect("volatile lock").as_mut().is_some_and(|t| t.take_reservation(shard, epoch, from, through))
    }

    /// Applies a committed entry to the volatile table too, if it is one the volatile
    /// table must see: a session that ends must end its volatile holds and waits.
    fn mirror(&self, now: Instant, entry: &Entry) {
        let mirrored = matches!(
            entry.cmd,
            Command::ApplyConfig { .. }
                | Command::AdoptShard { .. }
                | Command::SealShard { .. }
                | Command::CreateSession { .. }
                | Command::CreateOwnedSession { .. }
                | Command::CloseSession { .. }
                | Command::ExpireSession { .. }
        );
        if !mirrored {
            return;
        }
        let mut guard = self.volatile.lock().expect("volatile lock");
        let Some(table) = guard.as_mut() else { return };
        let applied = table.apply(entry);
        if let Some(clock) = self.clock.lock().expect("clock lock").as_mut() {
            // The command itself was already counted with the replicated apply.
            clock.on_events(now, &applied.events, table);
        }
        self.fire(&applied.events);
    }

    fn fire(&self, events: &[Event]) {
        let mut waiters = self.waiters.lock().expect("waiters lock");
        for ev in events {
            let result = match ev.kind {
                EventKind::Acquired { token, .. } => WaitResult::Granted(token),
                EventKind::Dequeued { reason } => WaitResult::Dequeued(reason),
                EventKind::Ended { .. } | EventKind::Queued { .. } => continue,
            };
            if let Some(list) = waiters.remove(&(ev.session, ev.request_id.clone())) {
                for tx in list {
                    let _ = tx.send(result);
                }
            }
        }
        drop(waiters);
        for ev in events {
            // No receivers is fine: nobody watches.
            let _ = self.events.send(ev.clone());
        }
    }
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
        let applied = self.state.apply(&entry);
        if let (Command::CloseSession { session } | Command::ExpireSession { session }, Ok(_)) = (&entry.cmd, &applied.result) {
            // The moment a replica applied a session's end (drills/sim/src/stamps.rs).
            tracing::debug!(session = session.0, "session ended");
        }
        stamp(&self.state, sealed.as_ref(), &applied.events);
        let now = Instant::now();
        let mut clock = self.hooks.clock.lock().expect("clock lock");
        if let Some(clock) = clock.as_mut() {
            clock.on_applied(now, &entry.cmd, &applied, &self.state);
        }
        self.hooks.arrivals.lock().expect("arrivals lock").on_applied(now, &entry.cmd, &applied);
        drop(clock);
        self.hooks.fire(&applied.events);
        self.hooks.mirror(now, &entry);
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
        // A clock (and a volatile table) built from the old state is wrong now; the
        // leader task rebuilds them.
        self.hooks.drop_volatile();
        let mut clock = self.hooks.clock.lock().expect("clock lock");
        *clock = None;
        self.hooks.arrivals.lock().expect("arrivals lock").clear();
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
