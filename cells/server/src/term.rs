//! [`LeaderTerm`]: everything a cell node knows only while it leads, for one Raft term,
//! owned by one value — the lease clock, the volatile table of efficiency namespaces,
//! the wake-ups of calls waiting in lock queues, and the registry's ownership lease.
//!
//! A new leader builds one from the replicated state when its duties start
//! (`leader.rs`), and it is dropped whole when the term ends: deposed, stopped, or its
//! state replaced by a snapshot. Dropping it answers every call still waiting in it
//! ([`WaitResult::Deposed`]): nobody is left to grant them here, and the leader of the
//! next term knows where each request stands.
//!
//! What the term guarantees by construction, not by care at each call site:
//! - **No grant answered outside the ownership lease** (issue #42, hole 2). A grant is
//!   committed under the lease that was checked when it was proposed, but a commit can
//!   stall (a slow disk, a slow quorum) past that lease's end, while the registry moves
//!   the shard on. So the answer is checked again when it leaves: a waiter is woken with
//!   its token only if the lease still covers the token's epoch ([`LeaderTerm::covers`]),
//!   and an immediate grant is answered through the same check (`Cell::answer_grant`).
//!   Past it, the call ends `UNAVAILABLE`; the retry with the same request id is
//!   answered by whoever serves the shard then.
//! - **A waiting call never outlives its term**, and is never answered by another term.
//!
//! The type is plain: `now` is passed in, and it holds no lock. `Hooks` (`machine.rs`)
//! keeps the one slot for the current term under one mutex; handlers reach it only
//! through `Hooks::door`, which answers `UNAVAILABLE` once the term is gone.

use crate::clock::{CheckpointArrivals, LeaseClock, Renewal};
use crate::ownership::{OwnershipLease, Refusal};
use holdfast_cell_state::{Applied, CellState, Command, DequeueReason, Entry, Event, EventKind};
use holdfast_core::{Epoch, FencingToken, RequestId, SessionId, ShardKey};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// How a queued acquire ended, for the call that is waiting on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitResult {
    Granted(FencingToken),
    Dequeued(DequeueReason),
    /// Granted, but the ownership lease no longer covers the token's epoch: the grant
    /// may already be ended by the shard's next owner, and is not handed out.
    LeaseEnded,
    /// The term the call waited in ended.
    Deposed,
}

/// Who a wake-up is for.
pub type WaiterKey = (SessionId, RequestId);

/// A cell leader's state for one Raft term. See the module doc.
#[derive(Debug)]
pub struct LeaderTerm {
    number: u64,
    clock: LeaseClock,
    /// The volatile table of efficiency namespaces (`volatile.rs` of the lock table).
    volatile: CellState,
    /// Ordered: waiters are woken in one order when the term ends (docs/simulation.md).
    waiters: BTreeMap<WaiterKey, Vec<oneshot::Sender<WaitResult>>>,
    /// The registry's ownership lease; `None` in admin mode (nothing gates grants).
    ownership: Option<OwnershipLease>,
}

impl LeaderTerm {
    /// The state of a leader elected in term `number`, built from the applied `state`
    /// (rule 4 of the session rules: the clock counts from now, checkpointed sessions
    /// from their arrival). `margin` is the ownership lease's margin when the cell
    /// follows the registry; the lease starts empty: nothing is granted until it renews.
    pub fn begin(
        number: u64,
        now: Instant,
        state: &CellState,
        checkpoint_interval: Duration,
        arrivals: &CheckpointArrivals,
        margin: Option<Duration>,
    ) -> LeaderTerm {
        LeaderTerm {
            number,
            clock: LeaseClock::on_election(now, state, checkpoint_interval, arrivals),
            volatile: state.volatile(),
            waiters: BTreeMap::new(),
            ownership: margin.map(OwnershipLease::new),
        }
    }

    /// The Raft term this leader was elected in.
    pub fn number(&self) -> u64 {
        self.number
    }

    pub fn clock(&mut self) -> &mut LeaseClock {
        &mut self.clock
    }

    pub fn volatile(&self) -> &CellState {
        &self.volatile
    }

    pub(crate) fn volatile_mut(&mut self) -> &mut CellState {
        &mut self.volatile
    }

    /// The ownership lease, `None` in admin mode.
    pub fn ownership(&mut self) -> Option<&mut OwnershipLease> {
        self.ownership.as_mut()
    }

    /// May a command that can grant in `shard` (served at `epoch`) be proposed now?
    pub fn may_grant(&self, now: Instant, shard: &ShardKey, epoch: Epoch) -> Result<(), Refusal> {
        self.ownership.as_ref().map_or(Ok(()), |o| o.may_grant(now, shard, epoch))
    }

    /// Why `shard` (not served by the table) is still refused with a retryable code.
    pub fn unserved(&self, shard: &ShardKey) -> Option<Refusal> {
        self.ownership.as_ref().and_then(|o| o.unserved(shard))
    }

    /// May a grant of `shard` at `epoch` be answered now: does the ownership lease still
    /// cover it? Always in admin mode.
    pub fn covers(&self, now: Instant, shard: &ShardKey, epoch: Epoch) -> bool {
        self.ownership.as_ref().is_none_or(|o| o.covers(now, shard, epoch))
    }

    /// A renewal of `session`, homed in `home` (its shard and the epoch served): confirmed
    /// only while the ownership lease covers that shard, and never so long that the
    /// client's rule — the session is lost at `sent + ttl_remaining - TTL/3`
    /// (docs/sdk.md) — reaches past the lease: `ttl_remaining` is at most what the lease
    /// has left plus TTL/3. So the holder's SDK declares the session lost before the
    /// lease ends, and the shard's next owner grants only after that (issue #43:
    /// renewals went on being confirmed with the registry away, while an unplanned move
    /// let the next owner grant). Admin mode: the clock alone decides.
    pub fn renew(&mut self, now: Instant, session: SessionId, home: Option<&(ShardKey, Epoch)>) -> Renewal {
        let left = self.lease_left(now, home);
        if left.is_some_and(|l| l.is_zero()) {
            return Renewal::LeaseEnded;
        }
        match self.clock.renew(now, session) {
            Renewal::Confirmed { ttl_remaining } => Renewal::Confirmed { ttl_remaining: under_lease(left, ttl_remaining, ttl_remaining) },
            other => other,
        }
    }

    /// How long a session homed in `home`, with `ttl`, may be told it has of
    /// `remaining`: all of it, or at most the ownership lease's time left plus
    /// `ttl`/3, so the client's rule (lost at `sent + answer - ttl/3`) ends before the
    /// lease; `None` once the lease no longer covers the home. For a renewal `ttl` is
    /// what the clock has left (its answer was always read so); for a new session,
    /// answered after its creation committed, the TTL granted (issue #43: a session
    /// created just before the lease ran out was confirmed its whole TTL).
    pub fn confirmable(&self, now: Instant, home: Option<&(ShardKey, Epoch)>, ttl: Duration, remaining: Duration) -> Option<Duration> {
        let left = self.lease_left(now, home);
        if left.is_some_and(|l| l.is_zero()) {
            return None;
        }
        Some(under_lease(left, ttl, remaining))
    }

    /// The ownership lease's time left for `home`; `None` in admin mode or without one.
    fn lease_left(&self, now: Instant, home: Option<&(ShardKey, Epoch)>) -> Option<Duration> {
        match (&self.ownership, home) {
            (Some(lease), Some((shard, epoch))) => Some(lease.left(now, shard, *epoch)),
            _ => None,
        }
    }

    /// Arms a wake-up for a queued acquire of this term.
    pub(crate) fn arm(&mut self, key: WaiterKey) -> oneshot::Receiver<WaitResult> {
        let (tx, rx) = oneshot::channel();
        self.waiters.entry(key).or_default().push(tx);
        rx
    }

    /// Drops the wake-ups of `key` whose calls went away.
    pub(crate) fn disarm_closed(&mut self, key: &WaiterKey) {
        if let Some(list) = self.waiters.get_mut(key) {
            list.retain(|tx| !tx.is_closed());
            if list.is_empty() {
                self.waiters.remove(key);
            }
        }
    }

    pub(crate) fn armed(&self) -> usize {
        self.waiters.values().map(Vec::len).sum()
    }

    /// Follows one committed entry: the clock, the wake-ups of its events, and the
    /// volatile table if the entry is one it must see. Returns the volatile table's own
    /// events, for the watchers.
    pub(crate) fn on_committed(&mut self, now: Instant, entry: &Entry, applied: &Applied, state: &CellState) -> Vec<Event> {
        self.clock.on_applied(now, &entry.cmd, applied, state);
        self.clock.note_revision(now, state.revision());
        self.wake(now, &applied.events);
        if !mirrored(&entry.cmd) {
            return Vec::new();
        }
        let mirrored = self.volatile.apply(entry);
        // The command itself was already counted with the replicated apply.
        self.clock.on_events(now, &mirrored.events, &self.volatile);
        self.wake(now, &mirrored.events);
        mirrored.events
    }

    /// Applies a lock command of an efficiency namespace to the volatile table; the
    /// clock and the waiting calls see it as they see a committed entry.
    pub(crate) fn apply_volatile(&mut self, now: Instant, entry: &Entry) -> Applied {
        let applied = self.volatile.apply(entry);
        self.clock.on_applied(now, &entry.cmd, &applied, &self.volatile);
        self.wake(now, &applied.events);
        applied
    }

    /// Wakes the calls waiting on `events`: a grant only while the ownership lease
    /// still covers it.
    fn wake(&mut self, now: Instant, events: &[Event]) {
        for ev in events {
            let result = match ev.kind {
                EventKind::Acquired { token, .. } if self.covers(now, &ev.shard, token.epoch()) => WaitResult::Granted(token),
                EventKind::Acquired { .. } => WaitResult::LeaseEnded,
                EventKind::Dequeued { reason } => WaitResult::Dequeued(reason),
                EventKind::Ended { .. } | EventKind::Queued { .. } => continue,
            };
            if let Some(list) = self.waiters.remove(&(ev.session, ev.request_id.clone())) {
                for tx in list {
                    let _ = tx.send(result);
                }
            }
        }
    }
}

/// The committed commands the volatile table must see too: configs, shards, and
/// sessions created and ended (a session that ends must end its volatile holds and
/// waits), so the two tables never disagree on who is alive.
fn mirrored(cmd: &Command) -> bool {
    matches!(
        cmd,
        Command::ApplyConfig { .. }
            | Command::AdoptShard { .. }
            | Command::SealShard { .. }
            | Command::CreateSession { .. }
            | Command::CreateOwnedSession { .. }
            | Command::CloseSession { .. }
            | Command::ExpireSession { .. }
    )
}

impl Drop for LeaderTerm {
    /// The term is over: every call still waiting in it is answered now.
    fn drop(&mut self) {
        for (_, list) in std::mem::take(&mut self.waiters) {
            for tx in list {
                let _ = tx.send(WaitResult::Deposed);
            }
        }
    }
}

/// `remaining`, cut to the ownership lease's time `left` plus `ttl`/3 (see
/// [`LeaderTerm::confirmable`]); all of it without a lease (admin mode).
fn under_lease(left: Option<Duration>, ttl: Duration, remaining: Duration) -> Duration {
    left.map_or(remaining, |l| remaining.min(l + ttl / 3))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ownership::Listed;
    use holdfast_core::{Intent, LockName, Mode, NamespaceConfig, NamespaceName, ShardName};

    const LEASE: Duration = Duration::from_millis(3_000);
    const MARGIN: Duration = Duration::from_millis(500);

    fn key() -> ShardKey {
        ShardKey::new(NamespaceName::new("pay").unwrap(), ShardName::default_shard())
    }

    fn acquire(session: u64, rid: &str, wait: bool) -> Command {
        Command::Acquire {
            shard: key(),
            epoch: None,
            name: LockName::new("x").unwrap(),
            session: SessionId(session),
            mode: Mode::Exclusive,
            request_id: RequestId::new(rid).unwrap(),
            value: vec![],
            wait,
        }
    }

    /// Applies `cmd` to `state` and hands it to `term` at `now`, as the apply loop does.
    fn commit(term: &mut LeaderTerm, state: &mut CellState, now: Instant, cmd: Command) -> Applied {
        let entry = Entry::new(0, cmd);
        let applied = state.apply(&entry);
        term.on_committed(now, &entry, &applied, state);
        applied
    }

    /// Hole 2 of issue #42, for a queued acquire: its grant commits after the ownership
    /// lease ended, and the waiting call must not be handed the token. Within the lease
    /// it is; and a term that ends answers the calls still waiting in it.
    #[test]
    fn a_waiter_is_woken_with_its_token_only_while_the_ownership_lease_covers_it() {
        let t0 = Instant::now();
        let mut state = CellState::new();
        for cmd in [
            Command::ApplyConfig { config: NamespaceConfig::with_defaults(key().ns.clone(), "o", Intent::Correctness) },
            Command::AdoptShard { shard: key(), epoch: Epoch(1), delayed_locks: vec![] },
            Command::CreateSession { shard: key(), session: SessionId(1), ttl_ms: 60_000, label: String::new() },
            Command::CreateSession { shard: key(), session: SessionId(2), ttl_ms: 60_000, label: String::new() },
            Command::CreateSession { shard: key(), session: SessionId(3), ttl_ms: 60_000, label: String::new() },
        ] {
            state.apply(&Entry::new(0, cmd)).result.unwrap();
        }
        let mut term = LeaderTerm::begin(7, t0, &state, Duration::from_millis(500), &CheckpointArrivals::default(), Some(MARGIN));
        let listed = Listed { shard: key(), epoch: Epoch(1), draining: false, delayed_locks: vec![], previous_unsealed: false, adopted: true };
        term.ownership().unwrap().renewed(t0, t0, LEASE, &[listed], |_| Duration::ZERO);

        commit(&mut term, &mut state, t0, acquire(1, "a", false));
        let mut within = term.arm((SessionId(2), RequestId::new("b").unwrap()));
        commit(&mut term, &mut state, t0, acquire(2, "b", true));
        let mut late = term.arm((SessionId(3), RequestId::new("c").unwrap()));
        commit(&mut term, &mut state, t0, acquire(3, "c", true));

        // Within the lease: session 2 is granted, and told its token.
        let token_a = state.holds().find(|h| h.3 == SessionId(1)).map(|h| h.2).unwrap();
        commit(
            &mut term,
            &mut state,
            t0 + Duration::from_secs(1),
            Command::ReleaseHeld { shard: key(), name: LockName::new("x").unwrap(), token: token_a, session: SessionId(1) },
        );
        let Ok(WaitResult::Granted(token_b)) = within.try_recv() else { panic!("the waiter within the lease was not told its grant") };
        // Past the lease (less its margin): session 3 is granted in the table, but the
        // call is not handed the token.
        commit(
            &mut term,
            &mut state,
            t0 + LEASE - MARGIN,
            Command::ReleaseHeld { shard: key(), name: LockName::new("x").unwrap(), token: token_b, session: SessionId(2) },
        );
        assert_eq!(late.try_recv(), Ok(WaitResult::LeaseEnded), "a grant committed past the ownership lease was handed out");

        // The term ends: a call still waiting in it is answered.
        let mut waiting = term.arm((SessionId(1), RequestId::new("again").unwrap()));
        drop(term);
        assert_eq!(waiting.try_recv(), Ok(WaitResult::Deposed));
    }
}
