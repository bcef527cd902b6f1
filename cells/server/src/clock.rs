//! The leader's lease clock: every time-based decision of a cell, measured on the
//! leader's monotonic clock and turned into commands to commit.
//!
//! It is a plain struct that takes `now` as an argument, so the session rules are
//! unit-tested without tokio and without sleeping. Only the leader has one; a new
//! leader builds a fresh one from the replicated state ([`LeaseClock::on_election`]).
//!
//! The session rules (docs/design.md, "Sessions: the four rules"):
//! 1. a renewal is confirmed only under the leader lease (checked by the caller, with
//!    openraft's lease read, before [`LeaseClock::renew`]);
//! 2. every `checkpoint_interval` the leader commits one entry listing the sessions that
//!    are late — silent for longer than the renewal period (TTL/3) plus one interval —
//!    with their remaining TTL ([`LeaseClock::checkpoint`]);
//! 3. a session listed in a checkpoint is marked the moment the checkpoint is proposed,
//!    and a renewal of a marked session is confirmed only after a `ClearCheckpoint`
//!    has committed ([`Renewal::NeedsClear`]);
//! 4. a new leader starts every countdown at its own election: the checkpointed
//!    remaining TTL if there is one, else the full TTL. The checkpointed TTL counts
//!    from when this node *applied* the checkpoint ([`CheckpointArrivals`]), not from
//!    the election, so elections do not add up (etcd#9395 in slow motion).
//!
//! Why that bounds a dead session: see `docs/sessions.md`.

use holdfast_cell_state::{Applied, CellState, Command, Event, EventKind};
use holdfast_core::{FencingToken, LockName, NamespaceName, RequestId, Revision, SessionId, ShardKey};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;
use tokio::time::Instant;

/// How long a timer's command may be in flight before the clock proposes it again.
const REPROPOSE_AFTER: Duration = Duration::from_millis(500);
/// How long an acquire's outcome is remembered after its hold ended, so a retry with
/// the same request id is answered with it, never granted again (docs/semantics.md,
/// "Idempotent acquire"). Counted by the leader on its monotonic clock from the moment
/// it applied the end, or from its election for ends it did not see: never shorter.
/// The SDK retries one call for at most its wait plus 30 s.
pub const RETRY_WINDOW: Duration = Duration::from_secs(600);
/// How often the leader looks for records past the retry window.
const FORGET_EVERY: Duration = Duration::from_secs(30);
/// One sample of the revision per this much time is kept.
const REVISION_SAMPLE: Duration = Duration::from_secs(1);

#[derive(Debug, Clone)]
struct SessionTimer {
    ttl: Duration,
    deadline: Instant,
    /// When the client last renewed through this leader; `None` since the election.
    last_renew: Option<Instant>,
    /// Listed in a proposed checkpoint and not yet cleared: a renewal must clear first.
    checkpointed: bool,
    /// Listed in a checkpoint that is proposed and not yet applied. A `ClearCheckpoint`
    /// applied meanwhile may come before it in the log, so it does not clear the mark:
    /// only a clear applied after the checkpoint does (else the checkpoint's remaining
    /// TTL would outlive a confirmed renewal, and the next leader would expire a live
    /// session early).
    checkpoint_in_flight: bool,
    /// Its `ExpireSession` is proposed: no renewal can save it now.
    expiring: bool,
}

/// What [`LeaseClock::renew`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    /// Confirmed: tell the client this much TTL remains.
    Confirmed { ttl_remaining: Duration },
    /// Commit `ClearCheckpoint` for this session, then ask again.
    NeedsClear,
    /// The leader has no live session by that id.
    Unknown,
    /// The ownership lease no longer covers the session's shard: nothing is confirmed
    /// (decided by the leader's term, `term.rs`; the clock itself never says it).
    LeaseEnded,
}

/// The leader's timers. Ordered maps: timers due at the same instant are proposed in
/// key order, so one history replays the same way (docs/simulation.md) — a hash map's
/// order differs from one process to the next.
#[derive(Debug)]
pub struct LeaseClock {
    checkpoint_interval: Duration,
    last_checkpoint: Instant,
    sessions: BTreeMap<SessionId, SessionTimer>,
    /// Max-hold deadlines.
    holds: BTreeMap<(ShardKey, LockName, FencingToken), Instant>,
    /// Lock-delay deadlines, with how the delay each ends began (`None`: not recorded).
    delays: BTreeMap<(ShardKey, LockName), (Instant, Option<FencingToken>)>,
    /// Wait deadlines of queued acquires, with the revision each was queued at.
    waits: BTreeMap<(SessionId, RequestId), (Instant, Option<Revision>)>,
    /// The replicated table's revision as this leader saw it, oldest first: at the
    /// instant, everything at or below the revision had happened.
    revisions: std::collections::VecDeque<(Instant, Revision)>,
    last_forget: Instant,
}

impl LeaseClock {
    /// A new leader's clock (rule 4): a countdown the last checkpoint listed resumes
    /// from when this node applied that checkpoint (`arrivals`; the election if it does
    /// not know); every other countdown starts now with the full TTL.
    pub fn on_election(now: Instant, state: &CellState, checkpoint_interval: Duration, arrivals: &CheckpointArrivals) -> LeaseClock {
        let mut clock = LeaseClock {
            checkpoint_interval,
            last_checkpoint: now,
            sessions: BTreeMap::new(),
            holds: BTreeMap::new(),
            delays: BTreeMap::new(),
            waits: BTreeMap::new(),
            // What ended before the election ended at the latest now.
            revisions: [(now, state.revision())].into(),
            last_forget: now,
        };
        for (id, ttl_ms, checkpoint_ms) in state.session_countdowns() {
            let ttl = Duration::from_millis(ttl_ms);
            let deadline = match checkpoint_ms {
                Some(ms) => arrivals.seen(id).unwrap_or(now).min(now) + Duration::from_millis(ms),
                None => now + ttl,
            };
            clock.sessions.insert(
                id,
                SessionTimer { ttl, deadline, last_renew: None, checkpointed: checkpoint_ms.is_some(), checkpoint_in_flight: false, expiring: false },
            );
        }
        for (key, name, token, _) in state.holds() {
            if let Some(max_hold) = max_hold(state, &key.ns) {
                // Counted from when this node applied the grant (issue #42: from the
                // election, each leader change gave a hold its age again); a node
                // that never saw it (restarted, restored) counts from now: later, never
                // earlier.
                let granted = arrivals.granted(key, name, token).unwrap_or(now).min(now);
                clock.holds.insert((key.clone(), name.clone(), token), granted + max_hold);
            }
        }
        for (key, name, begun) in state.delayed_locks() {
            clock.delays.insert((key.clone(), name.clone()), (now + lock_delay(state, &key.ns), begun));
        }
        // The calls that were waiting on the old leader are gone; their clients retry
        // here with the same request id and set a fresh deadline. Until then, a waiter
        // stays queued no longer than its session's TTL.
        for (_, _, session, rid) in state.waiters() {
            let ttl = clock.sessions.get(&session).map_or(Duration::ZERO, |s| s.ttl);
            clock.waits.insert((session, rid.clone()), (now + ttl, state.queued_at(session, rid)));
        }
        clock
    }

    /// Rule 1 is the caller's; this applies rules 3 and 4's bookkeeping.
    pub fn renew(&mut self, now: Instant, session: SessionId) -> Renewal {
        let Some(t) = self.sessions.get_mut(&session) else { return Renewal::Unknown };
        if t.expiring || t.deadline <= now {
            // Its expiry is due or already proposed: too late to renew.
            return Renewal::Unknown;
        }
        if t.checkpointed {
            return Renewal::NeedsClear;
        }
        t.deadline = now + t.ttl;
        t.last_renew = Some(now);
        Renewal::Confirmed { ttl_remaining: t.ttl }
    }

    /// Remaining TTL of a live session, as this leader counts it.
    pub fn remaining(&self, now: Instant, session: SessionId) -> Option<Duration> {
        self.sessions.get(&session).filter(|t| !t.expiring).map(|t| t.deadline.saturating_duration_since(now))
    }

    /// A queued acquire's open call will give up at `deadline`.
    /// A wait that already ended (granted or dequeued meanwhile) has no timer to set.
    pub fn track_wait(&mut self, session: SessionId, request_id: RequestId, deadline: Instant) {
        if let Some((at, _)) = self.waits.get_mut(&(session, request_id)) {
            *at = deadline;
        }
    }

    /// Rule 2: the checkpoint to propose now, if one is due and lists anybody.
    /// Sessions it lists are marked at once (rule 3). A session already marked is not
    /// listed again: its committed remaining TTL, counted from its arrival, already
    /// describes it (and a new leader lists everyone it has not heard from once).
    pub fn checkpoint(&mut self, now: Instant) -> Option<Command> {
        if now.saturating_duration_since(self.last_checkpoint) < self.checkpoint_interval {
            return None;
        }
        self.last_checkpoint = now;
        // Late: silent for longer than the renewal period clients follow (TTL/3) plus
        // one checkpoint interval of slack, or not heard from since this leader's
        // election. A client that renews on time is never listed, so its renewals cost
        // no log write.
        let slack = self.checkpoint_interval;
        let mut listed: Vec<(SessionId, u64)> = self
            .sessions
            .iter_mut()
            .filter(|(_, t)| !t.expiring && !t.checkpointed && t.last_renew.is_none_or(|r| now.saturating_duration_since(r) > t.ttl / 3 + slack))
            .map(|(id, t)| {
                t.checkpointed = true;
                t.checkpoint_in_flight = true;
                (*id, t.deadline.saturating_duration_since(now).as_millis() as u64)
            })
            .collect();
        listed.sort();
        (!listed.is_empty()).then_some(Command::Checkpoint { sessions: listed })
    }

    /// The checkpoint `cmd` was not committed (its proposal failed): its sessions no
    /// longer wait for it. They stay marked, so a renewal clears them; were the failed
    /// proposal to commit after all, applying it marks them again.
    pub fn checkpoint_not_committed(&mut self, cmd: &Command) {
        if let Command::Checkpoint { sessions } = cmd {
            for (id, _) in sessions {
                if let Some(t) = self.sessions.get_mut(id) {
                    t.checkpoint_in_flight = false;
                }
            }
        }
    }

    /// Commands whose time has come: expiries, max holds, lifted delays, cancelled
    /// waits. Each is proposed again if it has not committed within a short while.
    pub fn due(&mut self, now: Instant) -> Vec<Command> {
        let mut out = Vec::new();
        for (id, t) in self.sessions.iter_mut() {
            if t.deadline <= now {
                out.push(Command::ExpireSession { session: *id });
                t.expiring = true;
                t.deadline = now + REPROPOSE_AFTER;
            }
        }
        for ((key, name, token), deadline) in self.holds.iter_mut() {
            if *deadline <= now {
                out.push(Command::EndHold { shard: key.clone(), name: name.clone(), token: *token });
                *deadline = now + REPROPOSE_AFTER;
            }
        }
        // Lifts and timeouts are named: a copy proposed again that commits after the
        // delay or wait it was for ended must not end the next one.
        for ((key, name), (deadline, begun)) in self.delays.iter_mut() {
            if *deadline <= now {
                out.push(Command::lift_lock_delay(key.clone(), name.clone(), *begun));
                *deadline = now + REPROPOSE_AFTER;
            }
        }
        for ((session, rid), (deadline, queued)) in self.waits.iter_mut() {
            if *deadline <= now {
                out.push(Command::time_out_wait(*session, rid.clone(), *queued));
                *deadline = now + REPROPOSE_AFTER;
            }
        }
        out
    }

    /// Notes the replicated table's revision after an apply (one sample a second).
    pub fn note_revision(&mut self, now: Instant, revision: Revision) {
        if self.revisions.back().is_none_or(|(at, _)| now.saturating_duration_since(*at) >= REVISION_SAMPLE) {
            self.revisions.push_back((now, revision));
        }
    }

    /// Every [`FORGET_EVERY`]: the revision at or below which every hold ended at least
    /// [`RETRY_WINDOW`] ago, for `ForgetRequests` (the caller checks there is anything
    /// to forget). `None` until a window has passed since this leader's election.
    pub fn forget_through(&mut self, now: Instant) -> Option<Revision> {
        if now.saturating_duration_since(self.last_forget) < FORGET_EVERY {
            return None;
        }
        self.last_forget = now;
        let cutoff = now.checked_sub(RETRY_WINDOW)?;
        let mut through = None;
        while let Some((at, rev)) = self.revisions.front().copied() {
            if at > cutoff {
                break;
            }
            through = Some(rev);
            // The newest sample old enough stays, so the next look starts from it.
            if self.revisions.get(1).is_some_and(|(next, _)| *next <= cutoff) {
                self.revisions.pop_front();
            } else {
                break;
            }
        }
        through
    }

    /// The earliest instant at which [`LeaseClock::due`] or a checkpoint has work.
    pub fn next_wakeup(&self) -> Instant {
        let mut next = self.last_checkpoint + self.checkpoint_interval;
        let all = self
            .sessions
            .values()
            .map(|t| t.deadline)
            .chain(self.holds.values().copied())
            .chain(self.delays.values().map(|(deadline, _)| *deadline))
            .chain(self.waits.values().map(|(deadline, _)| *deadline));
        for d in all {
            next = next.min(d);
        }
        next
    }

    /// Keeps the timers in step with what the log applied. `state` is the state after
    /// the apply.
    pub fn on_applied(&mut self, now: Instant, cmd: &Command, applied: &Applied, state: &CellState) {
        if applied.result.is_err() {
            return;
        }
        match cmd {
            Command::CreateSession { session, ttl_ms, .. } | Command::CreateOwnedSession { session, ttl_ms, .. } => {
                let ttl = Duration::from_millis(*ttl_ms);
                self.sessions.insert(
                    *session,
                    SessionTimer { ttl, deadline: now + ttl, last_renew: Some(now), checkpointed: false, checkpoint_in_flight: false, expiring: false },
                );
            }
            Command::CloseSession { session } | Command::ExpireSession { session } => {
                self.sessions.remove(session);
            }
            Command::ClearCheckpoint { session } => {
                if let Some(t) = self.sessions.get_mut(session) {
                    // Before the checkpoint it races with: that one still lands after.
                    t.checkpointed = t.checkpoint_in_flight;
                }
            }
            Command::Checkpoint { sessions } => {
                // Applied: what it says stands until a clear applied from now on. Also
                // for a session renewed since it was proposed (a proposal that failed
                // here and committed later): its next renewal must clear again.
                for (id, _) in sessions {
                    if let Some(t) = self.sessions.get_mut(id) {
                        t.checkpoint_in_flight = false;
                        t.checkpointed = true;
                    }
                }
            }
            Command::LiftLockDelay { shard, name } | Command::EndLockDelay { shard, name, .. } | Command::EndLockDelayAt { shard, name, .. } => {
                // A lift of an earlier delay leaves the running one's timer alone.
                self.follow_delay(now, state, shard, name);
            }
            Command::AdoptShard { shard, delayed_locks, .. } => {
                for name in delayed_locks {
                    self.follow_delay(now, state, shard, name);
                }
                // An adoption in place sealed the old epoch first, and with it the
                // sessions homed in the shard.
                self.sessions.retain(|id, _| state.session(*id).is_some());
            }
            Command::SealShard { .. } => {
                // The sessions homed in the shard ended with it.
                self.sessions.retain(|id, _| state.session(*id).is_some());
            }
            _ => {}
        }
        self.on_events(now, &applied.events, state);
    }

    /// Keeps the lock's delay timer in step with `state`: none if the lock is in no
    /// delay; a new one, from now, if it is in a delay other than the one timed (a
    /// delay already running goes on as it is).
    fn follow_delay(&mut self, now: Instant, state: &CellState, shard: &ShardKey, name: &LockName) {
        let key = (shard.clone(), name.clone());
        if !state.lock_delayed(shard, name) {
            self.delays.remove(&key);
            return;
        }
        let begun = state.delay_begun(shard, name);
        if self.delays.get(&key).is_none_or(|(_, timed)| *timed != begun) {
            self.delays.insert(key, (now + lock_delay(state, &shard.ns), begun));
        }
    }

    /// Keeps the hold, lock-delay and wait timers in step with events of the table
    /// `state` (the replicated one, or the leader's volatile table of efficiency
    /// namespaces, `volatile.rs` of the lock table), after they were applied.
    pub fn on_events(&mut self, now: Instant, events: &[Event], state: &CellState) {
        for ev in events {
            match &ev.kind {
                EventKind::Acquired { token, .. } => {
                    self.waits.remove(&(ev.session, ev.request_id.clone()));
                    if let Some(max_hold) = max_hold(state, &ev.shard.ns) {
                        self.holds.insert((ev.shard.clone(), ev.name.clone(), *token), now + max_hold);
                    }
                }
                EventKind::Ended { token, .. } => {
                    self.holds.remove(&(ev.shard.clone(), ev.name.clone(), *token));
                    self.follow_delay(now, state, &ev.shard, &ev.name);
                }
                EventKind::Dequeued { .. } => {
                    self.waits.remove(&(ev.session, ev.request_id.clone()));
                }
                EventKind::Queued { .. } => {
                    // Until the call that queued it says how long it waits
                    // (`track_wait`), a waiter stays queued no longer than its session's
                    // TTL: a caller gone while its acquire was being proposed leaves no
                    // waiter queued for good.
                    let ttl = self.sessions.get(&ev.session).map_or(Duration::ZERO, |s| s.ttl);
                    self.waits.insert((ev.session, ev.request_id.clone()), (now + ttl, Some(ev.revision)));
                }
            }
        }
    }
}

/// When this node applied the latest checkpoint that listed each session, on its own
/// monotonic clock. Kept by every node, leader or not.
///
/// Why it is safe to count a checkpointed TTL from here: the leader measured the
/// remaining TTL `R` when it proposed the checkpoint, at `c`; the client's deadline is
/// at most `c + R`. This node applied the entry after it was proposed, at `a >= c`, so
/// `a + R` is never earlier than the client's deadline (monotonic clocks on different
/// nodes advance at the same rate, up to drift). A node that learned the checkpoint
/// late (restart, snapshot) only counts from later: longer, never shorter.
///
/// The same argument covers holds: a hold's max-hold runs from its grant, which this
/// node applied no earlier than the leader committed it, so a new leader counting from
/// this node's apply ends the hold no earlier than the old leader would have, and no
/// later than that plus the time this node took to hear of the grant.
#[derive(Debug, Default)]
pub struct CheckpointArrivals {
    seen: HashMap<SessionId, Instant>,
    /// When this node applied each current hold's grant.
    granted: HashMap<(ShardKey, LockName, FencingToken), Instant>,
}

impl CheckpointArrivals {
    pub fn seen(&self, session: SessionId) -> Option<Instant> {
        self.seen.get(&session).copied()
    }

    /// When this node applied the grant of a current hold.
    pub fn granted(&self, shard: &ShardKey, name: &LockName, token: FencingToken) -> Option<Instant> {
        self.granted.get(&(shard.clone(), name.clone(), token)).copied()
    }

    /// Follows one applied command.
    pub fn on_applied(&mut self, now: Instant, cmd: &Command, applied: &Applied) {
        if applied.result.is_err() {
            return;
        }
        match cmd {
            Command::Checkpoint { sessions } => {
                for (id, _) in sessions {
                    self.seen.insert(*id, now);
                }
            }
            Command::ClearCheckpoint { session } | Command::CloseSession { session } | Command::ExpireSession { session } => {
                self.seen.remove(session);
            }
            _ => {}
        }
        for ev in &applied.events {
            match ev.kind {
                EventKind::Acquired { token, .. } => {
                    self.granted.insert((ev.shard.clone(), ev.name.clone(), token), now);
                }
                EventKind::Ended { token, .. } => {
                    self.granted.remove(&(ev.shard.clone(), ev.name.clone(), token));
                }
                EventKind::Queued { .. } | EventKind::Dequeued { .. } => {}
            }
        }
    }

    /// A snapshot replaced the state: what this node saw no longer describes it.
    pub fn clear(&mut self) {
        self.seen.clear();
        self.granted.clear();
    }
}

fn max_hold(state: &CellState, ns: &NamespaceName) -> Option<Duration> {
    state.namespace(ns).and_then(|c| c.max_hold_ms).map(Duration::from_millis)
}

fn lock_delay(state: &CellState, ns: &NamespaceName) -> Duration {
    Duration::from_millis(state.namespace(ns).map_or(0, |c| c.lock_delay_ms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdfast_cell_state::Entry;
    use holdfast_core::{Epoch, Intent, Mode, NamespaceConfig, ShardName};

    const TTL: Duration = Duration::from_millis(3_000);
    const CP: Duration = Duration::from_millis(500);

    fn key() -> ShardKey {
        ShardKey::new(NamespaceName::new("pay").unwrap(), ShardName::default_shard())
    }

    /// A state with one namespace and shard, and sessions 1 and 2.
    fn state_with_sessions(lock_delay_ms: u64, max_hold_ms: Option<u64>) -> CellState {
        let mut st = CellState::new();
        let mut cfg = NamespaceConfig::with_defaults(key().ns.clone(), "o", Intent::Correctness);
        cfg.lock_delay_ms = lock_delay_ms;
        cfg.max_hold_ms = max_hold_ms;
        for cmd in [
            Command::ApplyConfig { config: cfg },
            Command::AdoptShard { shard: key(), epoch: Epoch(1), delayed_locks: vec![] },
            Command::CreateSession { shard: key(), session: SessionId(1), ttl_ms: 3_000, label: String::new() },
            Command::CreateSession { shard: key(), session: SessionId(2), ttl_ms: 3_000, label: String::new() },
        ] {
            st.apply(&Entry::new(0, cmd)).result.unwrap();
        }
        st
    }

    /// Applies a command the way the cell's apply loop does: state, then the clock.
    fn commit(st: &mut CellState, clock: &mut LeaseClock, now: Instant, cmd: Command) -> Applied {
        let applied = st.apply(&Entry::new(0, cmd.clone()));
        clock.on_applied(now, &cmd, &applied, st);
        applied
    }

    #[test]
    fn renewing_session_never_expires_and_is_never_checkpointed() {
        let t0 = Instant::now();
        let st = state_with_sessions(0, None);
        let mut clock = LeaseClock::on_election(t0, &st, CP, &CheckpointArrivals::default());
        assert_eq!(clock.renew(t0, SessionId(1)), Renewal::Confirmed { ttl_remaining: TTL });
        // A session bound to its creator is timed like any other.
        let mut st = st;
        let owned = Command::CreateOwnedSession { shard: key(), session: SessionId(3), ttl_ms: 3_000, label: String::new(), owner: "user:alice".into() };
        commit(&mut st, &mut clock, t0, owned);
        assert_eq!(clock.renew(t0, SessionId(3)), Renewal::Confirmed { ttl_remaining: TTL });
        // The clock ticks every 100 ms; the client renews every TTL/3, as the SDK does.
        let tick = Duration::from_millis(100);
        let mut now = t0;
        let mut last_renewal = t0;
        for _ in 0..200 {
            now += tick;
            if now - last_renewal >= TTL / 3 {
                assert_eq!(clock.renew(now, SessionId(1)), Renewal::Confirmed { ttl_remaining: TTL });
                last_renewal = now;
            }
            if let Some(Command::Checkpoint { sessions }) = clock.checkpoint(now) {
                assert!(sessions.iter().all(|(id, _)| *id != SessionId(1)), "a live session was checkpointed at {:?}", now - t0);
            }
            assert!(!clock.due(now).contains(&Command::ExpireSession { session: SessionId(1) }));
        }
    }

    #[test]
    fn dead_session_expires_at_ttl_not_before() {
        let t0 = Instant::now();
        let st = state_with_sessions(0, None);
        let mut clock = LeaseClock::on_election(t0, &st, CP, &CheckpointArrivals::default());
        assert_eq!(clock.renew(t0, SessionId(2)), Renewal::Confirmed { ttl_remaining: TTL });
        let expire = Command::ExpireSession { session: SessionId(2) };
        assert!(!clock.due(t0 + TTL - Duration::from_millis(1)).contains(&expire));
        assert!(clock.due(t0 + TTL).contains(&expire));
        // Once its expiry is proposed, a late renewal cannot save it.
        assert_eq!(clock.renew(t0 + TTL + Duration::from_millis(1), SessionId(2)), Renewal::Unknown);
    }

    #[test]
    fn checkpointed_session_must_clear_before_renewal_is_confirmed() {
        let t0 = Instant::now();
        let mut st = state_with_sessions(0, None);
        let mut clock = LeaseClock::on_election(t0, &st, CP, &CheckpointArrivals::default());
        let cp = clock.checkpoint(t0 + CP).expect("nobody renewed since the election");
        let Command::Checkpoint { sessions } = &cp else { panic!() };
        assert_eq!(sessions, &vec![(SessionId(1), 2_500), (SessionId(2), 2_500)]);
        // The renewal arrives before the checkpoint even commits: it must clear first.
        assert_eq!(clock.renew(t0 + CP, SessionId(1)), Renewal::NeedsClear);
        commit(&mut st, &mut clock, t0 + CP, cp);
        commit(&mut st, &mut clock, t0 + CP, Command::ClearCheckpoint { session: SessionId(1) });
        assert_eq!(clock.renew(t0 + CP, SessionId(1)), Renewal::Confirmed { ttl_remaining: TTL });
        assert_eq!(st.session(SessionId(1)).unwrap().checkpoint_ms, None);
        assert_eq!(st.session(SessionId(2)).unwrap().checkpoint_ms, Some(2_500));
    }

    /// Issue #15, item 1: the checkpoint is marked when proposed but may be proposed
    /// after other due commands; a renewal's `ClearCheckpoint` then commits *before*
    /// it. That clear must not count: the checkpoint's remaining TTL lands after it and
    /// would otherwise stay in the state while renewals are confirmed, and the next
    /// leader would expire the live session at once.
    #[test]
    fn a_clear_that_commits_before_its_checkpoint_does_not_clear_it() {
        let t0 = Instant::now();
        let mut st = state_with_sessions(0, None);
        let mut clock = LeaseClock::on_election(t0, &st, CP, &CheckpointArrivals::default());
        let cp = clock.checkpoint(t0 + CP).expect("nobody renewed since the election");
        // The renewal races ahead of the checkpoint's proposal.
        assert_eq!(clock.renew(t0 + CP, SessionId(1)), Renewal::NeedsClear);
        commit(&mut st, &mut clock, t0 + CP, Command::ClearCheckpoint { session: SessionId(1) });
        assert_eq!(clock.renew(t0 + CP, SessionId(1)), Renewal::NeedsClear, "confirmed while its checkpoint is still to land");
        commit(&mut st, &mut clock, t0 + CP, cp);
        assert!(st.session(SessionId(1)).unwrap().checkpoint_ms.is_some());
        // Only a clear after the checkpoint confirms, and it leaves nothing stale behind.
        assert_eq!(clock.renew(t0 + CP, SessionId(1)), Renewal::NeedsClear);
        commit(&mut st, &mut clock, t0 + CP, Command::ClearCheckpoint { session: SessionId(1) });
        assert_eq!(clock.renew(t0 + CP, SessionId(1)), Renewal::Confirmed { ttl_remaining: TTL });
        assert_eq!(st.session(SessionId(1)).unwrap().checkpoint_ms, None, "a confirmed renewal with a checkpoint left in the state");
        // And so the next leader does not expire it early.
        let next = LeaseClock::on_election(t0 + CP * 2, &st, CP, &CheckpointArrivals::default());
        assert!(next.remaining(t0 + CP * 2, SessionId(1)).unwrap() >= TTL);
    }

    /// A checkpoint whose proposal failed, then committed anyway after a renewal was
    /// confirmed: applying it marks the session again, so the next renewal clears it.
    #[test]
    fn a_checkpoint_committed_after_its_proposal_failed_is_cleared_by_the_next_renewal() {
        let t0 = Instant::now();
        let mut st = state_with_sessions(0, None);
        let mut clock = LeaseClock::on_election(t0, &st, CP, &CheckpointArrivals::default());
        let cp = clock.checkpoint(t0 + CP).expect("a checkpoint");
        clock.checkpoint_not_committed(&cp);
        assert_eq!(clock.renew(t0 + CP, SessionId(1)), Renewal::NeedsClear);
        commit(&mut st, &mut clock, t0 + CP, Command::ClearCheckpoint { session: SessionId(1) });
        assert!(matches!(clock.renew(t0 + CP, SessionId(1)), Renewal::Confirmed { .. }));
        commit(&mut st, &mut clock, t0 + CP, cp);
        assert_eq!(clock.renew(t0 + CP, SessionId(1)), Renewal::NeedsClear);
        commit(&mut st, &mut clock, t0 + CP, Command::ClearCheckpoint { session: SessionId(1) });
        assert!(matches!(clock.renew(t0 + CP, SessionId(1)), Renewal::Confirmed { .. }));
        assert_eq!(st.session(SessionId(1)).unwrap().checkpoint_ms, None);
    }

    #[test]
    fn new_leader_resumes_checkpointed_countdowns_from_their_arrival() {
        let t0 = Instant::now();
        let mut st = state_with_sessions(0, None);
        let mut arrivals = CheckpointArrivals::default();
        let mut old = LeaseClock::on_election(t0, &st, CP, &arrivals);
        old.renew(t0, SessionId(1));
        old.renew(t0, SessionId(2));
        // Session 2 dies at t0; session 1 keeps renewing.
        let mut now = t0;
        for _ in 0..4 {
            now += CP;
            old.renew(now, SessionId(1));
            if let Some(cp) = old.checkpoint(now) {
                let applied = commit(&mut st, &mut old, now, cp.clone());
                arrivals.on_applied(now, &cp, &applied);
            }
        }
        let told = st.session(SessionId(2)).unwrap().checkpoint_ms.unwrap();
        // Late after TTL/3 + CP = 1.5 s of silence: first listed at 2 s.
        assert_eq!(told, 1_000, "3 s TTL minus 2 s without renewal");
        assert_eq!(arrivals.seen(SessionId(2)), Some(now));
        assert_eq!(arrivals.seen(SessionId(1)), None, "a renewing session is never listed");
        // The old leader dies; a new one is elected 0.5 s later.
        let elected = now + Duration::from_millis(500);
        let mut new = LeaseClock::on_election(elected, &st, CP, &arrivals);
        assert_eq!(new.remaining(elected, SessionId(2)), Some(Duration::from_millis(500)));
        assert_eq!(new.remaining(elected, SessionId(1)), Some(TTL));
        // Exactly the client's own deadline (t0 + 3 s): not before, not later.
        let expire = Command::ExpireSession { session: SessionId(2) };
        assert!(!new.due(t0 + TTL - Duration::from_millis(1)).contains(&expire));
        assert!(new.due(t0 + TTL).contains(&expire));
        // A node that never saw the checkpoint arrive (restarted, or restored from a
        // snapshot) counts from its election: later, never earlier.
        let mut late = LeaseClock::on_election(elected, &st, CP, &CheckpointArrivals::default());
        assert_eq!(late.remaining(elected, SessionId(2)), Some(Duration::from_millis(1_000)));
        assert!(!late.due(elected + Duration::from_millis(999)).contains(&expire));
    }

    #[test]
    fn repeated_elections_do_not_keep_a_dead_session_alive() {
        // etcd#9395: leases reset on every election. Here a checkpointed countdown
        // resumes from when the checkpoint arrived, so elections do not add up.
        let t0 = Instant::now();
        let mut st = state_with_sessions(0, None);
        let mut arrivals = CheckpointArrivals::default();
        let election = Duration::from_millis(1_000);
        let mut now = t0;
        let mut expired_at = None;
        for _term in 0..20 {
            let mut clock = LeaseClock::on_election(now, &st, CP, &arrivals);
            now += CP;
            if clock.due(now).contains(&Command::ExpireSession { session: SessionId(2) }) {
                expired_at = Some(now);
                break;
            }
            if let Some(cp) = clock.checkpoint(now) {
                let applied = commit(&mut st, &mut clock, now, cp.clone());
                arrivals.on_applied(now, &cp, &applied);
            }
            now += election;
        }
        let expired_at = expired_at.expect("the dead session never expired");
        // The stated bound (docs/sessions.md): TTL + 2C + E, whatever the number of terms.
        assert!(expired_at - t0 >= TTL, "expired {:?} after its last renewal", expired_at - t0);
        assert!(expired_at - t0 <= TTL + 2 * CP + election, "{:?}", expired_at - t0);
    }

    /// Issue #42: a hold's max-hold is counted from its grant, not again from each
    /// election. Before, a leader elected 1.5 s into a 2 s max-hold ended the hold 3.5 s
    /// after its grant; every further election added the hold's age again.
    #[test]
    fn a_new_leader_ends_a_hold_at_its_max_hold_counted_from_the_grant() {
        let t0 = Instant::now();
        let mut st = state_with_sessions(0, Some(2_000));
        let mut arrivals = CheckpointArrivals::default();
        let mut old = LeaseClock::on_election(t0, &st, CP, &arrivals);
        let applied = commit(&mut st, &mut old, t0, acquire_l(1, false));
        arrivals.on_applied(t0, &acquire_l(1, false), &applied);
        let Ok(holdfast_cell_state::Outcome::Granted { token }) = applied.result else { panic!() };
        let end = Command::EndHold { shard: key(), name: LockName::new("l").unwrap(), token };
        // Elections at 1.5 s and again at 1.9 s: the hold still ends at 2 s.
        let mut new = LeaseClock::on_election(t0 + Duration::from_millis(1_500), &st, CP, &arrivals);
        let mut newer = LeaseClock::on_election(t0 + Duration::from_millis(1_900), &st, CP, &arrivals);
        for clock in [&mut new, &mut newer] {
            assert!(!clock.due(t0 + Duration::from_millis(1_999)).contains(&end));
            assert!(clock.due(t0 + Duration::from_millis(2_000)).contains(&end), "the max-hold restarted at the election");
        }
        // A node that never applied the grant (restarted) counts from its election.
        let mut late = LeaseClock::on_election(t0 + Duration::from_millis(1_500), &st, CP, &CheckpointArrivals::default());
        assert!(!late.due(t0 + Duration::from_millis(3_499)).contains(&end));
        assert!(late.due(t0 + Duration::from_millis(3_500)).contains(&end));
        // The hold ends: the arrival is forgotten.
        let ended = commit(&mut st, &mut new, t0 + Duration::from_millis(2_000), end.clone());
        arrivals.on_applied(t0, &end, &ended);
        assert_eq!(arrivals.granted(&key(), &LockName::new("l").unwrap(), token), None);
    }

    /// Issue #42: the retry window is a time. The leader forgets an acquire's outcome
    /// only once [`RETRY_WINDOW`] has passed since it saw the revision the hold ended
    /// at; what ended before its election counts from the election.
    #[test]
    fn a_finished_acquire_is_forgotten_only_a_retry_window_after_it_ended() {
        let t0 = Instant::now();
        let st = state_with_sessions(0, None);
        let before_election = st.revision();
        let mut clock = LeaseClock::on_election(t0, &st, CP, &CheckpointArrivals::default());
        // Revisions seen at 1 s and at 2 s.
        clock.note_revision(t0 + Duration::from_secs(1), Revision(before_election.0 + 5));
        clock.note_revision(t0 + Duration::from_secs(2), Revision(before_election.0 + 9));
        assert_eq!(clock.forget_through(t0 + RETRY_WINDOW - Duration::from_millis(1)), None, "forgotten before a window passed");
        assert_eq!(clock.forget_through(t0 + RETRY_WINDOW + Duration::from_millis(999)), None, "looked again before FORGET_EVERY");
        let at = t0 + RETRY_WINDOW + FORGET_EVERY;
        // A window before `at` is t0 + 30 s: every sample is older; the newest wins.
        assert_eq!(clock.forget_through(at), Some(Revision(before_election.0 + 9)));
        // A fresh leader: what ended before its election is a window away from it.
        let mut fresh = LeaseClock::on_election(at, &st, CP, &CheckpointArrivals::default());
        assert_eq!(fresh.forget_through(at + RETRY_WINDOW - Duration::from_millis(1)), None);
        assert_eq!(fresh.forget_through(at + RETRY_WINDOW + FORGET_EVERY), Some(before_election));
    }

    /// Session `s` acquires lock `l` (request id `r`), waiting or not.
    fn acquire_l(s: u64, wait: bool) -> Command {
        Command::Acquire {
            shard: key(),
            epoch: None,
            name: LockName::new("l").unwrap(),
            session: SessionId(s),
            mode: Mode::Exclusive,
            request_id: RequestId::new("r").unwrap(),
            value: vec![],
            wait,
        }
    }

    #[test]
    fn max_hold_lock_delay_and_wait_timers() {
        let t0 = Instant::now();
        let mut st = state_with_sessions(1_000, Some(2_000));
        let mut clock = LeaseClock::on_election(t0, &st, CP, &CheckpointArrivals::default());
        let a = commit(&mut st, &mut clock, t0, acquire_l(1, false));
        let Ok(holdfast_cell_state::Outcome::Granted { token }) = a.result else { panic!() };
        commit(&mut st, &mut clock, t0, acquire_l(2, true));
        clock.track_wait(SessionId(2), RequestId::new("r").unwrap(), t0 + Duration::from_millis(10_000));
        let end = Command::EndHold { shard: key(), name: LockName::new("l").unwrap(), token };
        assert!(!clock.due(t0 + Duration::from_millis(1_999)).contains(&end));
        let due = clock.due(t0 + Duration::from_millis(2_000));
        assert!(due.contains(&end));
        commit(&mut st, &mut clock, t0 + Duration::from_millis(2_000), end);
        // MAX_HOLD triggered lock-delay: lifted 1 s later, then the waiter is granted.
        let delay = st.delay_begun(&key(), &LockName::new("l").unwrap()).expect("in lock-delay");
        assert_eq!(delay, token, "named by the hold whose end began it");
        let lift = Command::EndLockDelayAt { shard: key(), name: LockName::new("l").unwrap(), begun: delay };
        assert!(!clock.due(t0 + Duration::from_millis(2_999)).contains(&lift));
        assert!(clock.due(t0 + Duration::from_millis(3_000)).contains(&lift));
        let a = commit(&mut st, &mut clock, t0 + Duration::from_millis(3_000), lift.clone());
        assert!(a.events.iter().any(|e| matches!(e.kind, EventKind::Acquired { .. }) && e.session == SessionId(2)));
        // Session 2's hold runs into its max hold too: a second delay, named anew.
        let second_token = a.events.iter().find_map(|e| match e.kind {
            EventKind::Acquired { token, .. } => Some(token),
            _ => None,
        });
        let end = Command::EndHold { shard: key(), name: LockName::new("l").unwrap(), token: second_token.expect("granted") };
        assert!(clock.due(t0 + Duration::from_millis(5_000)).contains(&end));
        commit(&mut st, &mut clock, t0 + Duration::from_millis(5_000), end);
        let second = st.delay_begun(&key(), &LockName::new("l").unwrap()).expect("in lock-delay again");
        assert_ne!(second, delay);
        // The first lift, proposed again while its first copy's outcome was unknown,
        // commits now: it ends nothing, and the second delay's timer stands.
        let stale = commit(&mut st, &mut clock, t0 + Duration::from_millis(5_500), lift);
        assert!(stale.events.is_empty(), "{stale:?}");
        let lift = Command::EndLockDelayAt { shard: key(), name: LockName::new("l").unwrap(), begun: second };
        assert!(!clock.due(t0 + Duration::from_millis(5_999)).contains(&lift));
        assert!(clock.due(t0 + Duration::from_millis(6_000)).contains(&lift));
        // The granted waiter's wait timer is gone.
        let timeouts = clock.due(t0 + Duration::from_millis(20_000));
        assert!(!timeouts.iter().any(|c| matches!(c, Command::EndWait { .. } | Command::CancelWait { .. })), "{timeouts:?}");
    }

    /// A wait's timeout names the wait: a copy of it proposed again, committed after a
    /// retry of the same request queued again, ends nothing and leaves the retry's
    /// timer standing.
    #[test]
    fn a_late_copy_of_a_timeout_leaves_the_retried_wait_and_its_timer() {
        let t0 = Instant::now();
        let mut st = state_with_sessions(0, None);
        let mut clock = LeaseClock::on_election(t0, &st, CP, &CheckpointArrivals::default());
        let rid = || RequestId::new("r").unwrap();
        commit(&mut st, &mut clock, t0, acquire_l(1, false));
        commit(&mut st, &mut clock, t0, acquire_l(2, true));
        clock.track_wait(SessionId(2), rid(), t0 + Duration::from_millis(1_000));
        let first = st.queued_at(SessionId(2), &rid()).expect("queued");
        let timeout = Command::EndWait { session: SessionId(2), request_id: rid(), queued: first };
        assert!(!clock.due(t0 + Duration::from_millis(999)).contains(&timeout));
        assert!(clock.due(t0 + Duration::from_millis(1_000)).contains(&timeout));
        commit(&mut st, &mut clock, t0 + Duration::from_millis(1_000), timeout.clone());
        // The client retries the same request, and waits 5 s this time.
        let t1 = t0 + Duration::from_millis(1_200);
        commit(&mut st, &mut clock, t1, acquire_l(2, true));
        clock.track_wait(SessionId(2), rid(), t1 + Duration::from_millis(5_000));
        let second = st.queued_at(SessionId(2), &rid()).expect("queued again");
        assert_ne!(first, second);
        let stale = commit(&mut st, &mut clock, t1 + Duration::from_millis(100), timeout);
        assert!(stale.events.is_empty(), "{stale:?}");
        let timeout = Command::EndWait { session: SessionId(2), request_id: rid(), queued: second };
        assert!(!clock.due(t1 + Duration::from_millis(4_999)).contains(&timeout));
        assert!(clock.due(t1 + Duration::from_millis(5_000)).contains(&timeout), "the retry's timer is gone");
    }

    /// Issue #15, item 6: a queued acquire whose caller went away while it was being
    /// proposed never reaches `track_wait`; it must still be cancelled, at the latest
    /// one session TTL after it was queued.
    #[test]
    fn a_waiter_whose_call_never_tracked_it_is_cancelled_within_a_ttl() {
        let t0 = Instant::now();
        let mut st = state_with_sessions(1_000, None);
        let mut clock = LeaseClock::on_election(t0, &st, CP, &CheckpointArrivals::default());
        commit(&mut st, &mut clock, t0, acquire_l(1, false));
        commit(&mut st, &mut clock, t0, acquire_l(2, true));
        // No track_wait: the call was dropped.
        let queued = st.queued_at(SessionId(2), &RequestId::new("r").unwrap()).expect("queued");
        let cancel = Command::EndWait { session: SessionId(2), request_id: RequestId::new("r").unwrap(), queued };
        let ttl = clock.sessions[&SessionId(2)].ttl;
        assert!(!clock.due(t0 + ttl - Duration::from_millis(1)).contains(&cancel));
        assert!(clock.due(t0 + ttl).contains(&cancel), "a waiter nobody tracks stays queued");
    }
}
