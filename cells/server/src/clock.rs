//! The leader's lease clock: every time-based decision of a cell, measured on the
//! leader's monotonic clock and turned into commands to commit.
//!
//! It is a plain struct that takes `now` as an argument, so the session rules are
//! unit-tested without tokio and without sleeping. Only the leader has one; a new
//! leader builds a fresh one from the replicated state ([`LeaseClock::on_election`]).
//!
//! The session rules (DESIGN.md, "Lock semantics"):
//! 1. a renewal is confirmed only under the leader lease (checked by the caller, with
//!    openraft's lease read, before [`LeaseClock::renew`]);
//! 2. every `checkpoint_interval` the leader commits one entry listing the sessions that
//!    did not renew during the interval, with their remaining TTL
//!    ([`LeaseClock::checkpoint`]);
//! 3. a session listed in a checkpoint is marked the moment the checkpoint is proposed,
//!    and a renewal of a marked session is confirmed only after a `ClearCheckpoint`
//!    has committed ([`Renewal::NeedsClear`]);
//! 4. a new leader starts every countdown at its own election: the checkpointed
//!    remaining TTL if there is one, else the full TTL.
//!
//! Why that bounds a dead session: see `docs/sessions.md`.

use holdfast_cell_state::{Applied, CellState, Command, EventKind};
use holdfast_core::{FencingToken, LockName, NamespaceName, RequestId, SessionId, ShardKey};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a timer's command may be in flight before the clock proposes it again.
const REPROPOSE_AFTER: Duration = Duration::from_millis(500);

#[derive(Debug, Clone)]
struct SessionTimer {
    ttl: Duration,
    deadline: Instant,
    /// When the client last renewed through this leader; `None` since the election.
    last_renew: Option<Instant>,
    /// Listed in a proposed checkpoint and not yet cleared: a renewal must clear first.
    checkpointed: bool,
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
}

/// The leader's timers.
#[derive(Debug)]
pub struct LeaseClock {
    checkpoint_interval: Duration,
    last_checkpoint: Instant,
    sessions: HashMap<SessionId, SessionTimer>,
    /// Max-hold deadlines.
    holds: HashMap<(ShardKey, LockName, FencingToken), Instant>,
    /// Lock-delay deadlines.
    delays: HashMap<(ShardKey, LockName), Instant>,
    /// Wait deadlines of queued acquires.
    waits: HashMap<(SessionId, RequestId), Instant>,
}

impl LeaseClock {
    /// A new leader's clock: every countdown starts now (rule 4).
    pub fn on_election(now: Instant, state: &CellState, checkpoint_interval: Duration) -> LeaseClock {
        let mut clock = LeaseClock {
            checkpoint_interval,
            last_checkpoint: now,
            sessions: HashMap::new(),
            holds: HashMap::new(),
            delays: HashMap::new(),
            waits: HashMap::new(),
        };
        for (id, ttl_ms, checkpoint_ms) in state.session_countdowns() {
            let ttl = Duration::from_millis(ttl_ms);
            let remaining = checkpoint_ms.map_or(ttl, Duration::from_millis);
            clock.sessions.insert(
                id,
                SessionTimer { ttl, deadline: now + remaining, last_renew: None, checkpointed: checkpoint_ms.is_some(), expiring: false },
            );
        }
        for (key, name, token, _) in state.holds() {
            if let Some(max_hold) = max_hold(state, &key.ns) {
                clock.holds.insert((key.clone(), name.clone(), token), now + max_hold);
            }
        }
        for (key, name) in state.delayed_locks() {
            clock.delays.insert((key.clone(), name.clone()), now + lock_delay(state, &key.ns));
        }
        // The calls that were waiting on the old leader are gone; their clients retry
        // here with the same request id and set a fresh deadline. Until then, a waiter
        // stays queued no longer than its session's TTL.
        for (_, _, session, rid) in state.waiters() {
            let ttl = clock.sessions.get(&session).map_or(Duration::ZERO, |s| s.ttl);
            clock.waits.insert((session, rid.clone()), now + ttl);
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
    pub fn track_wait(&mut self, session: SessionId, request_id: RequestId, deadline: Instant) {
        self.waits.insert((session, request_id), deadline);
    }

    /// Rule 2: the checkpoint to propose now, if one is due and lists anybody.
    /// Sessions it lists are marked at once (rule 3).
    pub fn checkpoint(&mut self, now: Instant) -> Option<Command> {
        if now.saturating_duration_since(self.last_checkpoint) < self.checkpoint_interval {
            return None;
        }
        let interval_start = self.last_checkpoint;
        self.last_checkpoint = now;
        let mut listed: Vec<(SessionId, u64)> = self
            .sessions
            .iter_mut()
            .filter(|(_, t)| !t.expiring && t.last_renew.is_none_or(|r| r < interval_start))
            .map(|(id, t)| {
                t.checkpointed = true;
                (*id, t.deadline.saturating_duration_since(now).as_millis() as u64)
            })
            .collect();
        listed.sort();
        (!listed.is_empty()).then_some(Command::Checkpoint { sessions: listed })
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
        for ((key, name), deadline) in self.delays.iter_mut() {
            if *deadline <= now {
                out.push(Command::LiftLockDelay { shard: key.clone(), name: name.clone() });
                *deadline = now + REPROPOSE_AFTER;
            }
        }
        for ((session, rid), deadline) in self.waits.iter_mut() {
            if *deadline <= now {
                out.push(Command::CancelWait { session: *session, request_id: rid.clone() });
                *deadline = now + REPROPOSE_AFTER;
            }
        }
        out
    }

    /// The earliest instant at which [`LeaseClock::due`] or a checkpoint has work.
    pub fn next_wakeup(&self) -> Instant {
        let mut next = self.last_checkpoint + self.checkpoint_interval;
        let all = self
            .sessions
            .values()
            .map(|t| t.deadline)
            .chain(self.holds.values().copied())
            .chain(self.delays.values().copied())
            .chain(self.waits.values().copied());
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
            Command::CreateSession { session, ttl_ms, .. } => {
                let ttl = Duration::from_millis(*ttl_ms);
                self.sessions.insert(
                    *session,
                    SessionTimer { ttl, deadline: now + ttl, last_renew: Some(now), checkpointed: false, expiring: false },
                );
            }
            Command::CloseSession { session } | Command::ExpireSession { session } => {
                self.sessions.remove(session);
            }
            Command::ClearCheckpoint { session } => {
                if let Some(t) = self.sessions.get_mut(session) {
                    t.checkpointed = false;
                }
            }
            Command::LiftLockDelay { shard, name } => {
                self.delays.remove(&(shard.clone(), name.clone()));
            }
            Command::AdoptShard { shard, delayed_locks, .. } => {
                let delay = lock_delay(state, &shard.ns);
                for name in delayed_locks {
                    self.delays.insert((shard.clone(), name.clone()), now + delay);
                }
            }
            _ => {}
        }
        for ev in &applied.events {
            match &ev.kind {
                EventKind::Acquired { token, .. } => {
                    self.waits.remove(&(ev.session, ev.request_id.clone()));
                    if let Some(max_hold) = max_hold(state, &ev.shard.ns) {
                        self.holds.insert((ev.shard.clone(), ev.name.clone(), *token), now + max_hold);
                    }
                }
                EventKind::Ended { token, .. } => {
                    self.holds.remove(&(ev.shard.clone(), ev.name.clone(), *token));
                    let key = (ev.shard.clone(), ev.name.clone());
                    let delayed = state.describe(&ev.shard, &ev.name).is_ok_and(|v| v.delayed);
                    if delayed && !self.delays.contains_key(&key) {
                        self.delays.insert(key, now + lock_delay(state, &ev.shard.ns));
                    }
                }
                EventKind::Dequeued { .. } => {
                    self.waits.remove(&(ev.session, ev.request_id.clone()));
                }
                EventKind::Queued { .. } => {}
            }
        }
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
        let mut clock = LeaseClock::on_election(t0, &st, CP);
        let mut now = t0;
        for _ in 0..40 {
            now += TTL / 3;
            assert_eq!(clock.renew(now, SessionId(1)), Renewal::Confirmed { ttl_remaining: TTL });
            if let Some(Command::Checkpoint { sessions }) = clock.checkpoint(now) {
                assert!(sessions.iter().all(|(id, _)| *id != SessionId(1)), "a live session was checkpointed");
            }
            assert!(!clock.due(now).contains(&Command::ExpireSession { session: SessionId(1) }));
        }
    }

    #[test]
    fn dead_session_expires_at_ttl_not_before() {
        let t0 = Instant::now();
        let st = state_with_sessions(0, None);
        let mut clock = LeaseClock::on_election(t0, &st, CP);
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
        let mut clock = LeaseClock::on_election(t0, &st, CP);
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

    #[test]
    fn new_leader_resumes_checkpointed_countdowns() {
        let t0 = Instant::now();
        let mut st = state_with_sessions(0, None);
        let mut old = LeaseClock::on_election(t0, &st, CP);
        old.renew(t0, SessionId(1));
        old.renew(t0, SessionId(2));
        // Session 2 dies at t0; session 1 keeps renewing.
        let mut now = t0;
        for _ in 0..4 {
            now += CP;
            old.renew(now, SessionId(1));
            if let Some(cp) = old.checkpoint(now) {
                commit(&mut st, &mut old, now, cp);
            }
        }
        let told = st.session(SessionId(2)).unwrap().checkpoint_ms.unwrap();
        assert_eq!(told, 1_000, "3 s TTL minus 2 s without renewal");
        // The old leader dies; a new one is elected 1.5 s later.
        let elected = now + Duration::from_millis(1_500);
        let mut new = LeaseClock::on_election(elected, &st, CP);
        assert_eq!(new.remaining(elected, SessionId(2)), Some(Duration::from_millis(1_000)));
        assert_eq!(new.remaining(elected, SessionId(1)), Some(TTL));
        // Not before the client's own deadline (t0 + 3 s), and within the stated bound.
        let expiry = elected + Duration::from_millis(1_000);
        assert!(expiry >= t0 + TTL);
        assert!(expiry <= t0 + TTL + 2 * CP + Duration::from_millis(1_500));
        assert!(new.due(expiry).contains(&Command::ExpireSession { session: SessionId(2) }));
    }

    #[test]
    fn repeated_elections_do_not_keep_a_dead_session_alive() {
        // etcd#9395: leases reset on every election. Here each leader that serves one
        // checkpoint interval shortens the countdown for the next.
        let t0 = Instant::now();
        let mut st = state_with_sessions(0, None);
        let mut now = t0;
        let mut expired_at = None;
        for _term in 0..20 {
            let mut clock = LeaseClock::on_election(now, &st, CP);
            now += CP;
            if clock.due(now).contains(&Command::ExpireSession { session: SessionId(2) }) {
                expired_at = Some(now);
                break;
            }
            if let Some(cp) = clock.checkpoint(now) {
                commit(&mut st, &mut clock, now, cp);
            }
            now += Duration::from_millis(1_000); // election time
        }
        let expired_at = expired_at.expect("the dead session never expired");
        // Each term: 0.5 s served (counted) + 1 s election (not counted).
        assert!(expired_at - t0 <= Duration::from_millis(6 * 1_500 + 500), "{:?}", expired_at - t0);
    }

    #[test]
    fn max_hold_lock_delay_and_wait_timers() {
        let t0 = Instant::now();
        let mut st = state_with_sessions(1_000, Some(2_000));
        let mut clock = LeaseClock::on_election(t0, &st, CP);
        let acquire = |s: u64, wait| Command::Acquire {
            shard: key(),
            epoch: None,
            name: LockName::new("l").unwrap(),
            session: SessionId(s),
            mode: Mode::Exclusive,
            request_id: RequestId::new("r").unwrap(),
            value: vec![],
            wait,
        };
        let a = commit(&mut st, &mut clock, t0, acquire(1, false));
        let Ok(holdfast_cell_state::Outcome::Granted { token }) = a.result else { panic!() };
        commit(&mut st, &mut clock, t0, acquire(2, true));
        clock.track_wait(SessionId(2), RequestId::new("r").unwrap(), t0 + Duration::from_millis(10_000));
        let end = Command::EndHold { shard: key(), name: LockName::new("l").unwrap(), token };
        assert!(!clock.due(t0 + Duration::from_millis(1_999)).contains(&end));
        let due = clock.due(t0 + Duration::from_millis(2_000));
        assert!(due.contains(&end));
        commit(&mut st, &mut clock, t0 + Duration::from_millis(2_000), end);
        // MAX_HOLD triggered lock-delay: lifted 1 s later, then the waiter is granted.
        let lift = Command::LiftLockDelay { shard: key(), name: LockName::new("l").unwrap() };
        assert!(!clock.due(t0 + Duration::from_millis(2_999)).contains(&lift));
        assert!(clock.due(t0 + Duration::from_millis(3_000)).contains(&lift));
        let a = commit(&mut st, &mut clock, t0 + Duration::from_millis(3_000), lift);
        assert!(a.events.iter().any(|e| matches!(e.kind, EventKind::Acquired { .. }) && e.session == SessionId(2)));
        // The granted waiter's wait timer is gone.
        let cancel = Command::CancelWait { session: SessionId(2), request_id: RequestId::new("r").unwrap() };
        assert!(!clock.due(t0 + Duration::from_millis(20_000)).contains(&cancel));
    }
}
