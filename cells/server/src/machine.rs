//! The cell's replicated state as the Raft substrate sees it: the pure lock table plus
//! the hooks that the server needs to see every apply, in log order, as it happens.
//!
//! The lock table stays pure. The hooks are glue: the leader's lease clock (updated in
//! the same critical section as the state, so a clock and the state it was built from
//! never disagree), the open calls of queued acquires (woken by their grant), and the
//! broadcast that feeds Watch streams. None of them can change the replicated state.

use crate::clock::{CheckpointArrivals, LeaseClock};
use holdfast_cell_state::{CellState, DequeueReason, Entry, Event, EventKind};
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
        Arc::new(Hooks { clock: Mutex::new(None), arrivals: Mutex::new(CheckpointArrivals::default()), waiters: Mutex::new(BTreeMap::new()), events })
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

    fn fire(&self, events: &[Event]) {
        let mut waiters = self.waiters.lock().expect("waiters lock");
        for ev in events {
            let result = match ev.kind {
                EventKind::Acquired { token, .. } => WaitResult::Granted(token),
                EventKind::Dequeued { reason } => WaitResult::Dequeued(reason),
                _ => continue,
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

impl ReplicatedState for CellMachine {
    fn apply(&mut self, log_index: u64, payload: &[u8]) -> io::Result<Vec<u8>> {
        let entry = Entry::decode(payload).map_err(|e| holdfast_raft::undecodable("cell", log_index, &e))?;
        let applied = self.state.apply(&entry);
        let now = Instant::now();
        let mut clock = self.hooks.clock.lock().expect("clock lock");
        if let Some(clock) = clock.as_mut() {
            clock.on_applied(now, &entry.cmd, &applied, &self.state);
        }
        self.hooks.arrivals.lock().expect("arrivals lock").on_applied(now, &entry.cmd, &applied);
        drop(clock);
        self.hooks.fire(&applied.events);
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
        // A clock built from the old state is wrong now; the leader task rebuilds it.
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
