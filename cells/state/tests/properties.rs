//! Property tests: random command sequences against the lock table, with a checker
//! that reads every event of the whole history. Each invariant below has been seen to
//! fail when the guarded code was broken on purpose (`scripts/check-safety-tests.sh`
//! replays those mutations).

mod common;

use common::*;
use holdfast_cell_state::{Applied, CellState, Command, Entry, Event, EventKind};
use holdfast_core::{Epoch, FencingToken, LockName, Mode, RequestId, Revision, SessionId, ShardKey};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

const LOCKS: [&str; 3] = ["alpha", "beta", "gamma"];

#[derive(Debug, Clone)]
enum Op {
    Create(u64),
    Close(u64),
    Expire(u64),
    Acquire {
        s: u64,
        lock: usize,
        shared: bool,
        r: u8,
        wait: bool,
    },
    /// Release a token picked from those issued so far (or one never issued).
    Release {
        lock: usize,
        pick: usize,
    },
    /// A wait's timeout: `named` 0 is the older form that ends whichever wait the
    /// request is in; 1 names the request's current wait (as the model knows it); 2
    /// names another revision, as a late copy of an earlier timeout does.
    Cancel {
        s: u64,
        r: u8,
        named: u8,
    },
    EndHold {
        lock: usize,
        pick: usize,
    },
    /// A lock-delay's lift: `named` as for `Cancel`; 2 names a token picked from
    /// those issued (mostly not how the running delay began).
    Lift {
        lock: usize,
        named: u8,
        pick: usize,
    },
    Break {
        lock: usize,
    },
    Checkpoint {
        s: u64,
        rem: u64,
    },
    Clear(u64),
    /// Seal and re-adopt at the next epoch (a transfer back to this cell).
    Bump,
}

fn op() -> impl Strategy<Value = Op> {
    let s = 1u64..=5;
    prop_oneof![
        3 => s.clone().prop_map(Op::Create),
        1 => s.clone().prop_map(Op::Close),
        1 => s.clone().prop_map(Op::Expire),
        10 => (s.clone(), 0..LOCKS.len(), any::<bool>(), 0u8..4, any::<bool>())
            .prop_map(|(s, lock, shared, r, wait)| Op::Acquire { s, lock, shared, r, wait }),
        5 => (0..LOCKS.len(), 0usize..64).prop_map(|(lock, pick)| Op::Release { lock, pick }),
        2 => (s.clone(), 0u8..4, 0u8..3).prop_map(|(s, r, named)| Op::Cancel { s, r, named }),
        1 => (0..LOCKS.len(), 0usize..64).prop_map(|(lock, pick)| Op::EndHold { lock, pick }),
        2 => (0..LOCKS.len(), 0u8..3, 0usize..64).prop_map(|(lock, named, pick)| Op::Lift { lock, named, pick }),
        1 => (0..LOCKS.len()).prop_map(|lock| Op::Break { lock }),
        1 => (s.clone(), 0u64..3_000).prop_map(|(s, rem)| Op::Checkpoint { s, rem }),
        1 => s.prop_map(Op::Clear),
        1 => Just(Op::Bump),
    ]
}

/// Turns an op into a command, given what the checker's model has seen so far.
fn command(op: &Op, model: &Checker) -> Command {
    let (issued, epoch) = (&model.issued, model.epoch);
    let pick = |p: usize| issued.get(p % (issued.len() + 1)).copied().unwrap_or(FencingToken(u64::MAX / 2));
    match op {
        Op::Create(s) => Command::CreateSession { shard: key(), session: SessionId(*s), ttl_ms: 3_000, label: String::new() },
        Op::Close(s) => Command::CloseSession { session: SessionId(*s) },
        Op::Expire(s) => Command::ExpireSession { session: SessionId(*s) },
        Op::Acquire { s, lock, shared, r, wait } => Command::Acquire {
            shard: key(),
            epoch: Some(epoch),
            name: name(LOCKS[*lock]),
            session: SessionId(*s),
            mode: if *shared { Mode::Shared } else { Mode::Exclusive },
            request_id: rid(&format!("r{r}")),
            value: vec![*r],
            wait: *wait,
        },
        Op::Release { lock, pick: p } => Command::Release { shard: key(), name: name(LOCKS[*lock]), token: pick(*p) },
        Op::Cancel { s, r, named } => {
            let (session, request_id) = (SessionId(*s), rid(&format!("r{r}")));
            let queued = model.queued_at.get(&(session, request_id.clone())).copied();
            match named {
                0 => Command::CancelWait { session, request_id },
                1 => Command::time_out_wait(session, request_id, queued),
                _ => Command::EndWait { session, request_id, queued: Revision(queued.map_or(1, |q| q.0.saturating_sub(1))) },
            }
        }
        Op::EndHold { lock, pick: p } => Command::EndHold { shard: key(), name: name(LOCKS[*lock]), token: pick(*p) },
        Op::Lift { lock, named, pick: p } => {
            let name = name(LOCKS[*lock]);
            match named {
                0 => Command::LiftLockDelay { shard: key(), name },
                1 => Command::lift_lock_delay(key(), name.clone(), model.delay_begun.get(&name).copied()),
                _ => Command::EndLockDelayAt { shard: key(), name, begun: pick(*p) },
            }
        }
        Op::Break { lock } => Command::BreakLock { shard: key(), name: name(LOCKS[*lock]), by: "sre".into(), reason: "test".into() },
        Op::Checkpoint { s, rem } => Command::Checkpoint { sessions: vec![(SessionId(*s), *rem)] },
        Op::Clear(s) => Command::ClearCheckpoint { session: SessionId(*s) },
        Op::Bump => Command::AdoptShard { shard: key(), epoch: Epoch(epoch.0 + 1), delayed_locks: vec![] },
    }
}

/// Reads the whole history as it grows and fails on the first broken invariant.
#[derive(Default)]
struct Checker {
    /// Every token granted, in grant order.
    issued: Vec<FencingToken>,
    /// Requests that were ever granted: a second grant is a double grant.
    granted: BTreeSet<(SessionId, RequestId)>,
    /// The FIFO queue of each lock, rebuilt from Queued/Dequeued/Acquired events.
    queues: BTreeMap<(ShardKey, LockName), Vec<(SessionId, RequestId)>>,
    epoch: Epoch,
    /// Locks in lock-delay, from Ended events and lifts, with the token of the hold
    /// whose end began each delay (the model's own account, not the table's).
    delay_begun: BTreeMap<LockName, FencingToken>,
    /// The revision each waiting request was queued at, from Queued events.
    queued_at: BTreeMap<(SessionId, RequestId), Revision>,
}

impl Checker {
    fn step(&mut self, state: &mut CellState, at: u64, cmd: Command) -> Result<Applied, TestCaseError> {
        let before = state.clone();
        let applied = state.apply(&Entry::new(at, cmd.clone()));
        // A refusal changes nothing; so does a lock command that produced no event
        // (a retried acquire, a repeated release, a late timer).
        let lock_cmd =
            matches!(cmd, Command::Acquire { .. } | Command::Release { .. } | Command::CancelWait { .. } | Command::EndWait { .. } | Command::EndHold { .. });
        if applied.result.is_err() || (lock_cmd && applied.events.is_empty()) {
            prop_assert_eq!(&before, &*state, "{:?} -> {:?} changed the state without an event", cmd, applied.result);
        }
        match (&cmd, &applied.result) {
            (Command::AdoptShard { epoch, .. }, Ok(_)) => {
                self.epoch = *epoch;
                self.delay_begun.clear();
            }
            (Command::LiftLockDelay { name, .. }, Ok(_)) => {
                self.delay_begun.remove(name);
            }
            // A named lift ends the delay it names and no other.
            (Command::EndLockDelayAt { name, begun, .. }, Ok(_)) if self.delay_begun.get(name) == Some(begun) => {
                self.delay_begun.remove(name);
            }
            // A named timeout ends the wait it names and no other.
            (Command::EndWait { session, request_id, queued }, Ok(_)) => {
                let req = (*session, request_id.clone());
                let dequeued = applied.events.iter().any(|e| (e.session, &e.request_id) == (req.0, &req.1) && matches!(e.kind, EventKind::Dequeued { .. }));
                let named_it = self.queued_at.get(&req) == Some(queued);
                prop_assert_eq!(dequeued, named_it, "{:?} against the wait queued at {:?}", cmd, self.queued_at.get(&req));
            }
            _ => {}
        }
        if let Command::Release { token, .. } = &cmd {
            // A release ends the hold of the token it names and no other.
            for ev in &applied.events {
                if let EventKind::Ended { token: ended, reason: holdfast_core::EndReason::Released } = ev.kind {
                    prop_assert_eq!(ended, *token, "release of {} ended another hold", token);
                }
            }
        }
        for ev in &applied.events {
            self.event(state, ev)?;
        }
        self.state_invariants(state)?;
        Ok(applied)
    }

    fn event(&mut self, state: &CellState, ev: &Event) -> Result<(), TestCaseError> {
        let q = self.queues.entry((ev.shard.clone(), ev.name.clone())).or_default();
        let req = (ev.session, ev.request_id.clone());
        match &ev.kind {
            EventKind::Queued { .. } => {
                self.queued_at.insert(req.clone(), ev.revision);
                q.push(req)
            }
            EventKind::Dequeued { .. } => {
                self.queued_at.remove(&req);
                let pos = q.iter().position(|r| *r == req);
                prop_assert!(pos.is_some(), "dequeued a request that was not queued: {:?}", req);
                q.remove(pos.unwrap());
            }
            EventKind::Acquired { token, .. } => {
                // FIFO: a queued request is granted only from the front; an immediate
                // grant only when nobody waits.
                match q.iter().position(|r| *r == req) {
                    Some(0) => {
                        q.remove(0);
                        self.queued_at.remove(&req);
                    }
                    Some(p) => prop_assert!(false, "granted waiter at position {} before those ahead: {:?}", p, q),
                    None => prop_assert!(q.is_empty(), "granted {:?} while {:?} were waiting", req, q),
                }
                prop_assert!(!self.delay_begun.contains_key(&ev.name), "granted {} during its lock-delay", ev.name);
                // Tokens strictly increase and never repeat.
                if let Some(last) = self.issued.last() {
                    prop_assert!(token > last, "token {} not above {}", token, last);
                }
                prop_assert_eq!(token.epoch(), self.epoch);
                self.issued.push(*token);
                // Never twice for one request.
                prop_assert!(self.granted.insert(req.clone()), "request {:?} granted twice", req);
                // Only to a live session.
                prop_assert!(state.session(ev.session).is_some(), "granted to dead session {}", ev.session);
            }
            EventKind::Ended { reason, token } => {
                // A delay already running goes on as it is, under its first name.
                if reason.triggers_lock_delay() && *reason != holdfast_core::EndReason::Moved {
                    self.delay_begun.entry(ev.name.clone()).or_insert(*token);
                }
            }
        }
        Ok(())
    }

    fn state_invariants(&self, state: &CellState) -> Result<(), TestCaseError> {
        for lock in LOCKS {
            let Ok(view) = state.describe(&key(), &name(lock)) else { continue };
            let exclusive = view.holders.iter().filter(|h| h.mode == Mode::Exclusive).count();
            prop_assert!(exclusive <= 1, "{} exclusive holders of {}", exclusive, lock);
            prop_assert!(exclusive == 0 || view.holders.len() == 1, "exclusive and shared together on {}", lock);
            for h in &view.holders {
                prop_assert!(state.session(h.session).is_some(), "dead session {} holds {}", h.session, lock);
                prop_assert!(h.token <= view.token_floor);
            }
            for w in &view.waiters {
                prop_assert!(state.session(w.session).is_some(), "dead session {} waits on {}", w.session, lock);
            }
        }
        Ok(())
    }
}

fn run(ops: &[Op]) -> Result<(CellState, Checker), TestCaseError> {
    let mut cell = Cell::new(500);
    let mut checker = Checker { epoch: Epoch(1), ..Default::default() };
    for (i, op) in ops.iter().enumerate() {
        let cmd = command(op, &checker);
        checker.step(&mut cell.state, 10_000 + i as u64, cmd)?;
    }
    Ok((cell.state, checker))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, max_shrink_iters: 4_000, ..ProptestConfig::default() })]

    /// Mutual exclusion, token order, FIFO, live-only grants, no double grant, and
    /// refusals that change nothing, over random histories.
    #[test]
    fn lock_table_invariants_hold(ops in proptest::collection::vec(op(), 1..160)) {
        run(&ops)?;
    }

    /// A snapshot taken anywhere, restored and continued, ends in the same state with
    /// the same answers as continuing without it.
    #[test]
    fn snapshot_restore_continue_equals_continue(ops in proptest::collection::vec(op(), 1..120), cut in 0usize..120) {
        let cut = cut.min(ops.len());
        let (mut live, mut checker) = run(&ops[..cut])?;
        let mut restored = CellState::restore(&live.snapshot()).expect("restore");
        prop_assert_eq!(&restored, &live);
        for (i, op) in ops[cut..].iter().enumerate() {
            let cmd = command(op, &checker);
            let at = 50_000 + i as u64;
            let from_snapshot = restored.apply(&Entry::new(at, cmd.clone()));
            let continued = checker.step(&mut live, at, cmd)?;
            prop_assert_eq!(from_snapshot, continued);
        }
        prop_assert_eq!(restored, live);
    }
}
