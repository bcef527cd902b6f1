//! Unit tests of the lock table's semantics, one behaviour each, named after what
//! they pin. Every refusal is checked to change nothing (`Cell::refused`).

mod common;

use common::*;
use holdfast_cell_state::{CellError, CellState, Command, DequeueReason, Entry, EventKind, Outcome};
use holdfast_core::{EndReason, Epoch, ErrorCode, FencingToken, Mode, SessionId, ShardKey, ShardName};

#[test]
fn first_token_of_an_epoch_is_epoch_shifted() {
    let mut c = Cell::new(0);
    let s = c.session(1);
    let t = c.grant(s, "a", "r1");
    assert_eq!(t.epoch(), Epoch(1));
    assert_eq!(t.seq().0, 1);
}

#[test]
fn release_grants_next_waiter_in_the_same_apply() {
    let mut c = Cell::new(0);
    let (a, b) = (c.session(1), c.session(2));
    let ta = c.grant(a, "a", "r1");
    assert_eq!(c.acquire(b, "a", Mode::Exclusive, "r1", true), Outcome::Queued { position: 0 });
    let applied = c.release("a", ta);
    assert_eq!(applied.result, Ok(Outcome::Released { token: ta }));
    let kinds: Vec<_> = applied.events.iter().map(|e| (e.session, e.kind.clone())).collect();
    let tb = FencingToken(ta.0 + 1);
    assert_eq!(kinds, vec![(a, EventKind::Ended { token: ta, reason: EndReason::Released }), (b, EventKind::Acquired { mode: Mode::Exclusive, token: tb }),]);
    // The waiter's retry now reports the grant.
    assert_eq!(c.acquire(b, "a", Mode::Exclusive, "r1", true), Outcome::Granted { token: tb });
}

#[test]
fn held_lock_without_wait_is_lock_held() {
    let mut c = Cell::new(0);
    let (a, b) = (c.session(1), c.session(2));
    c.grant(a, "a", "r1");
    let cmd = c.acquire_cmd(b, "a", Mode::Exclusive, "r1", false);
    assert_eq!(c.refused(cmd).code(), ErrorCode::LockHeld);
    let cmd = c.acquire_cmd(a, "a", Mode::Exclusive, "r2", true);
    assert_eq!(c.refused(cmd), CellError::LockHeld { name: "a".into(), by_self: true });
}

#[test]
fn acquire_retry_returns_original_outcome_and_never_grants_twice() {
    let mut c = Cell::new(0);
    let (a, b) = (c.session(1), c.session(2));
    let ta = c.grant(a, "a", "r1");
    let retry = c.apply(c.acquire_cmd(a, "a", Mode::Exclusive, "r1", false));
    assert_eq!(retry.result, Ok(Outcome::Granted { token: ta }));
    assert!(retry.events.is_empty(), "a retry must not grant again");
    assert_eq!(c.acquire(b, "a", Mode::Exclusive, "rb", true), Outcome::Queued { position: 0 });
    assert_eq!(c.acquire(b, "a", Mode::Exclusive, "rb", true), Outcome::Queued { position: 0 });
    c.release("a", ta);
    assert_eq!(c.acquire(a, "a", Mode::Exclusive, "r1", false), Outcome::HoldEnded { token: ta, reason: EndReason::Released });
    // A request id cannot be reused for another lock.
    let cmd = c.acquire_cmd(a, "other", Mode::Exclusive, "r1", false);
    assert_eq!(c.refused(cmd).code(), ErrorCode::InvalidArgument);
}

#[test]
fn release_with_stale_token_is_not_holder_and_changes_nothing() {
    let mut c = Cell::new(0);
    let (a, b) = (c.session(1), c.session(2));
    let ta = c.grant(a, "a", "r1");
    c.release("a", ta);
    let tb = c.grant(b, "a", "r1");
    // Repeating the release is OK and changes nothing.
    let before = c.state.clone();
    let again = c.release("a", ta);
    assert_eq!(again.result, Ok(Outcome::Released { token: ta }));
    assert!(again.events.is_empty());
    assert_eq!(before, c.state);
    // A token that was never a holder's is refused.
    let err = c.refused(Command::Release { shard: key(), name: name("a"), token: FencingToken(tb.0 + 7) });
    assert_eq!(err.code(), ErrorCode::NotHolder);
    // The lock is still b's.
    let d = c.state.describe(&key(), &name("a")).unwrap();
    assert_eq!(d.holders.iter().map(|h| h.token).collect::<Vec<_>>(), vec![tb]);
}

#[test]
fn expired_holders_release_is_not_holder_with_reason() {
    let mut c = Cell::new(0);
    let a = c.session(1);
    let ta = c.grant(a, "a", "r1");
    c.ok(Command::ExpireSession { session: a });
    let err = c.refused(Command::Release { shard: key(), name: name("a"), token: ta });
    assert_eq!(err, CellError::NotHolder { name: "a".into(), token: ta, ended: Some(EndReason::Expired) });
}

#[test]
fn shared_holders_then_exclusive_gets_larger_token() {
    let mut c = Cell::new(0);
    let (a, b, x) = (c.session(1), c.session(2), c.session(3));
    let Outcome::Granted { token: t1 } = c.acquire(a, "l", Mode::Shared, "r", false) else { panic!() };
    let Outcome::Granted { token: t2 } = c.acquire(b, "l", Mode::Shared, "r", false) else { panic!() };
    assert_eq!(c.acquire(x, "l", Mode::Exclusive, "r", true), Outcome::Queued { position: 0 });
    c.release("l", t1);
    assert_eq!(c.state.describe(&key(), &name("l")).unwrap().holders.len(), 1, "exclusive waits for every shared holder");
    let applied = c.release("l", t2);
    let granted: Vec<_> = applied
        .events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Acquired { token, .. } => Some(token),
            _ => None,
        })
        .collect();
    assert_eq!(granted.len(), 1);
    assert!(granted[0] > t1 && granted[0] > t2);
}

#[test]
fn shared_waiter_behind_exclusive_waiter_is_not_granted_early() {
    let mut c = Cell::new(0);
    let (a, x, b) = (c.session(1), c.session(2), c.session(3));
    c.acquire(a, "l", Mode::Shared, "r", false);
    assert_eq!(c.acquire(x, "l", Mode::Exclusive, "r", true), Outcome::Queued { position: 0 });
    // Compatible with the current holder, but FIFO puts it behind x.
    assert_eq!(c.acquire(b, "l", Mode::Shared, "r", true), Outcome::Queued { position: 1 });
    // Cancelling x unblocks b at once.
    let applied = c.apply(Command::CancelWait { session: x, request_id: rid("r") });
    assert_eq!(applied.result, Ok(Outcome::WaitCancelled));
    assert!(matches!(applied.events[0].kind, EventKind::Dequeued { reason: DequeueReason::Timeout }));
    assert!(matches!(applied.events[1].kind, EventKind::Acquired { mode: Mode::Shared, .. }));
    assert_eq!(applied.events[1].session, b);
}

#[test]
fn consecutive_shared_waiters_are_granted_together() {
    let mut c = Cell::new(0);
    let (x, a, b, y) = (c.session(1), c.session(2), c.session(3), c.session(4));
    let tx = c.grant(x, "l", "r");
    c.acquire(a, "l", Mode::Shared, "r", true);
    c.acquire(b, "l", Mode::Shared, "r", true);
    c.acquire(y, "l", Mode::Exclusive, "r", true);
    let applied = c.release("l", tx);
    let granted: Vec<_> = applied.events.iter().filter(|e| matches!(e.kind, EventKind::Acquired { .. })).map(|e| e.session).collect();
    assert_eq!(granted, vec![a, b]);
}

#[test]
fn cancel_wait_after_grant_returns_the_token() {
    let mut c = Cell::new(0);
    let (a, b) = (c.session(1), c.session(2));
    let ta = c.grant(a, "a", "r1");
    c.acquire(b, "a", Mode::Exclusive, "rb", true);
    c.release("a", ta);
    let tb = FencingToken(ta.0 + 1);
    assert_eq!(c.ok(Command::CancelWait { session: b, request_id: rid("rb") }), Outcome::AlreadyGranted { token: tb });
}

#[test]
fn expired_session_leaves_queue_and_is_never_granted() {
    let mut c = Cell::new(0);
    let (a, b, d) = (c.session(1), c.session(2), c.session(3));
    let ta = c.grant(a, "a", "r1");
    c.acquire(b, "a", Mode::Exclusive, "r1", true);
    c.acquire(d, "a", Mode::Exclusive, "r1", true);
    let applied = c.apply(Command::ExpireSession { session: b });
    assert!(matches!(applied.events[..], [ref e] if e.session == b && e.kind == EventKind::Dequeued { reason: DequeueReason::SessionEnded }));
    let applied = c.release("a", ta);
    assert_eq!(applied.events[1].session, d, "the dead waiter was skipped");
    let cmd = c.acquire_cmd(b, "a", Mode::Exclusive, "r2", true);
    assert_eq!(c.refused(cmd), CellError::SessionExpired(b, EndReason::Expired));
    let cmd = c.acquire_cmd(SessionId(999), "a", Mode::Exclusive, "r2", true);
    assert_eq!(c.refused(cmd).code(), ErrorCode::UnknownSession);
}

#[test]
fn session_expiry_ends_holds_with_expired_and_grants_next() {
    let mut c = Cell::new(0);
    let (a, b) = (c.session(1), c.session(2));
    let ta = c.grant(a, "a", "r1");
    c.acquire(b, "a", Mode::Exclusive, "r1", true);
    let applied = c.apply(Command::ExpireSession { session: a });
    assert_eq!(applied.events[0].kind, EventKind::Ended { token: ta, reason: EndReason::Expired });
    assert!(matches!(applied.events[1].kind, EventKind::Acquired { token, .. } if token > ta));
}

#[test]
fn close_session_releases_without_lock_delay() {
    let mut c = Cell::new(5_000);
    let (a, b) = (c.session(1), c.session(2));
    let ta = c.grant(a, "a", "r1");
    c.acquire(b, "a", Mode::Exclusive, "r1", true);
    let applied = c.apply(Command::CloseSession { session: a });
    assert_eq!(applied.events[0].kind, EventKind::Ended { token: ta, reason: EndReason::Released });
    assert!(matches!(applied.events[1].kind, EventKind::Acquired { .. }));
}

#[test]
fn lock_delay_after_expiry_until_lifted() {
    let mut c = Cell::new(5_000);
    let (a, b) = (c.session(1), c.session(2));
    c.grant(a, "a", "r1");
    c.ok(Command::ExpireSession { session: a });
    assert!(c.state.describe(&key(), &name("a")).unwrap().delayed);
    assert_eq!(c.state.delayed_locks().count(), 1);
    let cmd = c.acquire_cmd(b, "a", Mode::Exclusive, "r1", false);
    assert_eq!(c.refused(cmd).code(), ErrorCode::LockHeld);
    assert_eq!(c.acquire(b, "a", Mode::Exclusive, "r1", true), Outcome::Queued { position: 0 });
    let applied = c.apply(Command::LiftLockDelay { shard: key(), name: name("a") });
    assert!(matches!(applied.events[..], [ref e] if e.session == b && matches!(e.kind, EventKind::Acquired { .. })));
}

/// A lift names the delay it was timed for. The leader proposes a timer again when
/// its first proposal's outcome is unknown, and both copies may commit: the second,
/// landing after the lock's next delay began, must not cut that delay short (found by
/// the simulation: docs/simulation.md).
#[test]
fn a_lift_that_commits_twice_does_not_end_the_next_lock_delay() {
    let mut c = Cell::new(5_000);
    let (a, b, d) = (c.session(1), c.session(2), c.session(3));
    let ta = c.grant(a, "a", "r1");
    c.ok(Command::ExpireSession { session: a });
    let first = c.state.delay_begun(&key(), &name("a")).expect("in lock-delay");
    assert_eq!(first, ta, "a delay is named by the hold whose end began it");
    assert_eq!(c.acquire(b, "a", Mode::Exclusive, "r1", true), Outcome::Queued { position: 0 });
    let lift = Command::EndLockDelayAt { shard: key(), name: name("a"), begun: first };
    let applied = c.apply(lift.clone());
    assert!(matches!(applied.events[..], [ref e] if e.session == b && matches!(e.kind, EventKind::Acquired { .. })));
    c.ok(Command::ExpireSession { session: b });
    let second = c.state.delay_begun(&key(), &name("a")).expect("in lock-delay again");
    assert_ne!(first, second);
    // The first lift's second copy commits now: it changes nothing.
    let applied = c.apply(lift);
    assert!(applied.result.is_ok() && applied.events.is_empty(), "{applied:?}");
    assert_eq!(c.state.delay_begun(&key(), &name("a")), Some(second));
    let cmd = c.acquire_cmd(d, "a", Mode::Exclusive, "r1", false);
    assert_eq!(c.refused(cmd).code(), ErrorCode::LockHeld);
    // The record survives a snapshot, and the lift of the running delay ends it.
    c.state = CellState::restore(&c.state.snapshot()).unwrap();
    c.ok(Command::EndLockDelayAt { shard: key(), name: name("a"), begun: second });
    assert!(!c.state.describe(&key(), &name("a")).unwrap().delayed);
    assert!(matches!(c.acquire(d, "a", Mode::Exclusive, "r1", false), Outcome::Granted { .. }));
}

/// The same for a wait: a timeout names the wait it was timed for. A wait that timed
/// out leaves no record, so a retry of the same request queues again; a late copy of
/// the first timeout must leave the retry's wait alone.
#[test]
fn a_timeout_that_commits_twice_does_not_end_a_retried_wait() {
    let mut c = Cell::new(0);
    let (a, b) = (c.session(1), c.session(2));
    c.grant(a, "l", "r");
    assert_eq!(c.acquire(b, "l", Mode::Exclusive, "rb", true), Outcome::Queued { position: 0 });
    let first = c.state.queued_at(b, &rid("rb")).expect("queued");
    let timeout = Command::EndWait { session: b, request_id: rid("rb"), queued: first };
    assert_eq!(c.ok(timeout.clone()), Outcome::WaitCancelled);
    assert_eq!(c.state.queued_at(b, &rid("rb")), None);
    // The retry, with the same request id, queues again.
    assert_eq!(c.acquire(b, "l", Mode::Exclusive, "rb", true), Outcome::Queued { position: 0 });
    let second = c.state.queued_at(b, &rid("rb")).expect("queued again");
    assert_ne!(first, second);
    // The first timeout's second copy commits now: it changes nothing.
    let applied = c.apply(timeout);
    assert!(applied.result.is_ok() && applied.events.is_empty(), "{applied:?}");
    assert_eq!(c.state.describe(&key(), &name("l")).unwrap().waiters.len(), 1, "the retry is still queued");
    // The record survives a snapshot, and the timeout of the running wait ends it.
    c.state = CellState::restore(&c.state.snapshot()).unwrap();
    assert_eq!(c.ok(Command::EndWait { session: b, request_id: rid("rb"), queued: second }), Outcome::WaitCancelled);
    assert!(c.state.describe(&key(), &name("l")).unwrap().waiters.is_empty());
}

#[test]
fn waiter_queued_before_expiry_waits_out_the_lock_delay() {
    let mut c = Cell::new(5_000);
    let (a, b) = (c.session(1), c.session(2));
    c.grant(a, "a", "r1");
    c.acquire(b, "a", Mode::Exclusive, "r1", true);
    let applied = c.apply(Command::ExpireSession { session: a });
    assert!(applied.events.iter().all(|e| !matches!(e.kind, EventKind::Acquired { .. })), "granted during lock-delay");
    let applied = c.apply(Command::LiftLockDelay { shard: key(), name: name("a") });
    assert!(matches!(applied.events[0].kind, EventKind::Acquired { .. }));
}

#[test]
fn max_hold_ends_the_hold_with_max_hold() {
    let mut c = Cell::new(0);
    let (a, b) = (c.session(1), c.session(2));
    let ta = c.grant(a, "a", "r1");
    c.acquire(b, "a", Mode::Exclusive, "r1", true);
    let applied = c.apply(Command::EndHold { shard: key(), name: name("a"), token: ta });
    assert_eq!(applied.events[0].kind, EventKind::Ended { token: ta, reason: EndReason::MaxHold });
    assert!(matches!(applied.events[1].kind, EventKind::Acquired { .. }));
    // A late timer for a hold that already ended does nothing.
    let before = c.state.clone();
    let late = c.apply(Command::EndHold { shard: key(), name: name("a"), token: ta });
    assert!(late.events.is_empty());
    assert_eq!(before, c.state);
    assert_eq!(c.acquire(a, "a", Mode::Exclusive, "r1", false), Outcome::HoldEnded { token: ta, reason: EndReason::MaxHold });
}

#[test]
fn max_hold_triggers_lock_delay() {
    let mut c = Cell::new(1_000);
    let a = c.session(1);
    let ta = c.grant(a, "a", "r1");
    c.ok(Command::EndHold { shard: key(), name: name("a"), token: ta });
    assert!(c.state.describe(&key(), &name("a")).unwrap().delayed);
}

#[test]
fn break_lock_raises_floor_audits_and_tells_holder() {
    let mut c = Cell::new(0);
    let (a, b) = (c.session(1), c.session(2));
    let ta = c.grant(a, "a", "r1");
    let err = c.refused(Command::BreakLock { shard: key(), name: name("a"), by: "sre@x".into(), reason: " ".into() });
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    let applied = c.apply(Command::BreakLock { shard: key(), name: name("a"), by: "sre@x".into(), reason: "leaked holder".into() });
    assert_eq!(applied.result, Ok(Outcome::Broken { floor: ta, ended: vec![ta] }));
    assert_eq!(applied.events[0].kind, EventKind::Ended { token: ta, reason: EndReason::Broken });
    assert_eq!(applied.events[0].session, a, "the holder is told");
    let d = c.state.describe(&key(), &name("a")).unwrap();
    let rec = d.last_break.expect("audit record");
    assert_eq!((rec.by.as_str(), rec.reason.as_str(), rec.ended.clone()), ("sre@x", "leaked holder", vec![(a, ta)]));
    assert_eq!(d.token_floor, ta);
    let tb = c.grant(b, "a", "r1");
    assert!(tb > d.token_floor);
    // The old holder's token is now stale.
    assert_eq!(c.state.check_token(&key(), &name("a"), ta), Ok(false));
    assert_eq!(c.state.check_token(&key(), &name("a"), tb), Ok(true));
}

#[test]
fn seal_ends_holds_with_moved_and_refuses_afterwards() {
    let mut c = Cell::new(5_000);
    let (a, b) = (c.session(1), c.session(2));
    let ta = c.grant(a, "a", "r1");
    c.acquire(b, "a", Mode::Exclusive, "r1", true);
    let applied = c.apply(Command::SealShard { shard: key(), epoch: Epoch(1) });
    assert_eq!(applied.result, Ok(Outcome::Sealed { highest: Some(ta), held_locks: vec![name("a")] }));
    let kinds: Vec<_> = applied.events.iter().map(|e| e.kind.clone()).collect();
    assert_eq!(kinds, vec![EventKind::Dequeued { reason: DequeueReason::Moved }, EventKind::Ended { token: ta, reason: EndReason::Moved }]);
    let cmd = c.acquire_cmd(a, "b", Mode::Exclusive, "r9", false);
    assert_eq!(c.refused(cmd), CellError::NotOwner { shard: key().to_string(), sealed: true });
    // Sealing again reports the same.
    assert_eq!(c.ok(Command::SealShard { shard: key(), epoch: Epoch(1) }), Outcome::Sealed { highest: Some(ta), held_locks: vec![name("a")] });
    // The holder learns MOVED on release and on retry.
    let err = c.refused(Command::Release { shard: key(), name: name("a"), token: ta });
    assert_eq!(err, CellError::NotHolder { name: "a".into(), token: ta, ended: Some(EndReason::Moved) });
}

#[test]
fn adopt_at_higher_epoch_issues_larger_tokens_with_lock_delay() {
    let mut c = Cell::new(5_000);
    let a = c.session(1);
    let ta = c.grant(a, "a", "r1");
    c.ok(Command::SealShard { shard: key(), epoch: Epoch(1) });
    let err = c.refused(Command::AdoptShard { shard: key(), epoch: Epoch(1), delayed_locks: vec![] });
    assert_eq!(err.code(), ErrorCode::StaleEpoch);
    c.ok(Command::AdoptShard { shard: key(), epoch: Epoch(2), delayed_locks: vec![name("a")] });
    c.epoch = Epoch(2);
    let b = c.session(2);
    assert_eq!(c.acquire(b, "a", Mode::Exclusive, "r1", true), Outcome::Queued { position: 0 });
    let applied = c.apply(Command::LiftLockDelay { shard: key(), name: name("a") });
    let EventKind::Acquired { token, .. } = applied.events[0].kind else { panic!() };
    assert!(token > ta);
    assert_eq!(token.epoch(), Epoch(2));
    // A caller that still believes in epoch 1 is told.
    c.epoch = Epoch(1);
    let cmd = c.acquire_cmd(b, "z", Mode::Exclusive, "r2", false);
    assert_eq!(c.refused(cmd).code(), ErrorCode::StaleEpoch);
}

#[test]
fn adopt_over_unsealed_shard_seals_it_first() {
    let mut c = Cell::new(0);
    let a = c.session(1);
    let ta = c.grant(a, "a", "r1");
    let applied = c.apply(Command::AdoptShard { shard: key(), epoch: Epoch(2), delayed_locks: vec![] });
    assert_eq!(applied.events[0].kind, EventKind::Ended { token: ta, reason: EndReason::Moved });
}

#[test]
fn quotas_are_enforced_by_the_state_machine() {
    let mut cfg = config(0);
    cfg.quotas.max_keys = 2;
    cfg.quotas.max_sessions = 3;
    cfg.quotas.max_waiters_per_lock = 1;
    cfg.quotas.max_value_bytes = 8;
    let mut c = Cell::with_config(cfg);
    let (a, b, d) = (c.session(1), c.session(2), c.session(3));
    let err = c.refused(Command::CreateSession { shard: key(), session: SessionId(4), ttl_ms: 3_000, label: String::new() });
    assert_eq!(err.code(), ErrorCode::QuotaExceeded);
    c.grant(a, "k1", "r1");
    c.grant(a, "k2", "r2");
    let cmd = c.acquire_cmd(a, "k3", Mode::Exclusive, "r3", false);
    assert_eq!(c.refused(cmd).code(), ErrorCode::QuotaExceeded);
    c.acquire(b, "k1", Mode::Exclusive, "r1", true);
    let cmd = c.acquire_cmd(d, "k1", Mode::Exclusive, "r1", true);
    assert_eq!(c.refused(cmd).code(), ErrorCode::QuotaExceeded);
    let mut cmd = c.acquire_cmd(d, "k2", Mode::Exclusive, "r1", true);
    if let Command::Acquire { value, .. } = &mut cmd {
        *value = vec![0; 9];
    }
    assert_eq!(c.refused(cmd.clone()).code(), ErrorCode::QuotaExceeded);
    if let Command::Acquire { value, .. } = &mut cmd {
        *value = vec![0; 2048];
    }
    assert_eq!(c.refused(cmd).code(), ErrorCode::InvalidArgument, "over the hard 1 KiB cap");
}

#[test]
fn session_ttl_bounds_and_unknowns() {
    let mut c = Cell::new(0);
    let err = c.refused(Command::CreateSession { shard: key(), session: SessionId(1), ttl_ms: 10, label: String::new() });
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    let err = c.refused(Command::CreateSession { shard: key(), session: SessionId(1), ttl_ms: 10_000_000, label: String::new() });
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    let other_ns = ShardKey::new(holdfast_core::NamespaceName::new("nope").unwrap(), ShardName::default_shard());
    let err = c.refused(Command::CreateSession { shard: other_ns, session: SessionId(1), ttl_ms: 3_000, label: String::new() });
    assert_eq!(err.code(), ErrorCode::UnknownNamespace);
    let other_shard = ShardKey::new(ns(), ShardName::new("s2").unwrap());
    let err = c.refused(Command::CreateSession { shard: other_shard, session: SessionId(1), ttl_ms: 3_000, label: String::new() });
    assert_eq!(err.code(), ErrorCode::NotOwner);
    c.session(1);
    let err = c.refused(Command::CreateSession { shard: key(), session: SessionId(1), ttl_ms: 3_000, label: String::new() });
    assert_eq!(err, CellError::SessionIdInUse(SessionId(1)), "duplicate id");
    let err = c.refused(Command::ClearCheckpoint { session: SessionId(77) });
    assert_eq!(err.code(), ErrorCode::UnknownSession);
}

#[test]
fn checkpoint_records_remaining_ttl_until_cleared() {
    let mut c = Cell::new(0);
    let (a, b) = (c.session(1), c.session(2));
    assert_eq!(c.ok(Command::Checkpoint { sessions: vec![(a, 1_200), (SessionId(99), 5)] }), Outcome::Checkpointed { sessions: 1 });
    let cds: Vec<_> = c.state.session_countdowns().collect();
    assert_eq!(cds, vec![(a, 3_000, Some(1_200)), (b, 3_000, None)]);
    c.ok(Command::ClearCheckpoint { session: a });
    assert_eq!(c.state.session(a).unwrap().checkpoint_ms, None);
}

#[test]
fn apply_config_only_moves_forward_and_validates() {
    let mut c = Cell::new(0);
    let mut old = config(0);
    old.version = 1;
    assert_eq!(c.ok(Command::ApplyConfig { config: old }), Outcome::ConfigUnchanged { current: 1 });
    let mut bad = config(0);
    bad.version = 2;
    bad.ttl_min_ms = 9_000;
    bad.ttl_max_ms = 1_000;
    assert_eq!(c.refused(Command::ApplyConfig { config: bad }).code(), ErrorCode::InvalidArgument);
    let mut new = config(7);
    new.version = 2;
    assert_eq!(c.ok(Command::ApplyConfig { config: new }), Outcome::ConfigApplied { version: 2 });
}

#[test]
fn watch_history_resumes_from_a_revision_and_reports_compaction() {
    let mut c = Cell::new(0);
    let a = c.session(1);
    let t = c.grant(a, "a", "r1");
    let r1 = c.state.revision();
    c.release("a", t);
    c.grant(a, "b", "r2");
    let after = c.state.events_after(r1, None).unwrap();
    assert_eq!(after.len(), 2);
    assert!(after.windows(2).all(|w| w[0].revision < w[1].revision));
    let only_b = c.state.events_after(holdfast_core::Revision(0), Some((&key(), &name("b")))).unwrap();
    assert_eq!(only_b.len(), 1);
    let fresh = CellState::new();
    assert!(fresh.events_after(holdfast_core::Revision(0), None).unwrap().is_empty());
}

#[test]
fn snapshot_round_trips_and_rejects_foreign_bytes() {
    let mut c = Cell::new(1_000);
    let (a, b) = (c.session(1), c.session(2));
    c.grant(a, "a", "r1");
    c.acquire(b, "a", Mode::Exclusive, "r1", true);
    let bytes = c.state.snapshot();
    assert_eq!(CellState::restore(&bytes).unwrap(), c.state);
    assert!(CellState::restore(b"nonsense").is_err());
    let mut future = bytes.clone();
    future[4] = 99;
    assert!(matches!(CellState::restore(&future), Err(holdfast_cell_state::CodecError::UnknownVersion { found: 99, .. })));
    let e = Entry::new(5, Command::CloseSession { session: a });
    assert_eq!(Entry::decode(&e.encode()).unwrap(), e);
}

#[test]
fn every_cell_error_has_its_stable_code() {
    // The codes the state machine can produce, each reached above; this pins the map.
    let pairs = [
        (CellError::UnknownNamespace("x".into()), ErrorCode::UnknownNamespace),
        (CellError::NotOwner { shard: "x".into(), sealed: false }, ErrorCode::NotOwner),
        (CellError::StaleEpoch { shard: "x".into(), expected: 1, actual: 2 }, ErrorCode::StaleEpoch),
        (CellError::UnknownSession(SessionId(1)), ErrorCode::UnknownSession),
        (CellError::SessionExpired(SessionId(1), EndReason::Expired), ErrorCode::SessionExpired),
        (CellError::LockHeld { name: "x".into(), by_self: false }, ErrorCode::LockHeld),
        (CellError::NotHolder { name: "x".into(), token: FencingToken(1), ended: None }, ErrorCode::NotHolder),
        (CellError::QuotaExceeded { what: "x".into(), limit: 1 }, ErrorCode::QuotaExceeded),
        (CellError::InvalidArgument("x".into()), ErrorCode::InvalidArgument),
        (CellError::Unavailable("x".into()), ErrorCode::Unavailable),
    ];
    for (err, code) in pairs {
        assert_eq!(err.code(), code, "{err}");
        assert!(!err.to_string().is_empty());
    }
}

#[test]
fn max_hold_with_a_waiter_waits_out_the_lock_delay() {
    let mut c = Cell::new(1_000);
    let (a, b) = (c.session(1), c.session(2));
    let ta = c.grant(a, "a", "r1");
    c.acquire(b, "a", Mode::Exclusive, "r1", true);
    let applied = c.apply(Command::EndHold { shard: key(), name: name("a"), token: ta });
    assert!(applied.events.iter().all(|e| !matches!(e.kind, EventKind::Acquired { .. })), "granted during lock-delay: {applied:?}");
}

#[test]
fn a_session_remembers_its_owner_through_snapshots_until_it_ends() {
    let mut c = Cell::new(0);
    let owned = SessionId(7);
    c.ok(Command::CreateOwnedSession { shard: key(), session: owned, ttl_ms: 3_000, label: "w".into(), owner: "user:alice".into() });
    let anonymous = c.session(8);
    assert_eq!(c.state.session(owned).unwrap().owner.as_deref(), Some("user:alice"));
    assert_eq!(c.state.session(anonymous).unwrap().owner, None, "an unauthenticated session is bound to nobody");
    let t = c.grant(owned, "a", "r1");
    assert_eq!(c.state.holder_session(&key(), &name("a"), t), Some(owned));
    assert_eq!(c.state.holder_session(&key(), &name("a"), FencingToken(t.0 + 1)), None);
    let restored = CellState::restore(&c.state.snapshot()).unwrap();
    assert_eq!(restored, c.state);
    assert_eq!(restored.session(owned).unwrap().owner.as_deref(), Some("user:alice"), "the owner survives a snapshot");
    c.ok(Command::CloseSession { session: owned });
    assert_eq!(CellState::restore(&c.state.snapshot()).unwrap(), c.state, "and leaves with its session");
    let long = "u".repeat(holdfast_cell_state::MAX_OWNER_BYTES + 1);
    let err = c.refused(Command::CreateOwnedSession { shard: key(), session: SessionId(9), ttl_ms: 3_000, label: String::new(), owner: long });
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
}

#[test]
fn a_version_1_snapshot_still_loads_with_no_owners() {
    // Written the way version 1 wrote a snapshot: the state alone.
    let mut c = Cell::new(0);
    let s = c.session(1);
    c.grant(s, "a", "r1");
    let v1 = holdfast_core::codec::encode_versioned(b"HFCS", 1, &c.state);
    assert_eq!(CellState::restore(&v1).unwrap(), c.state);
}

/// Version 3 numbered delays from a counter that replicas restored from different
/// snapshots could disagree on: its numbers are dropped, so every replica treats
/// those delays alike (unrecorded: any lift ends them).
#[test]
fn a_version_3_snapshot_loads_with_its_delays_unrecorded() {
    let mut c = Cell::new(5_000);
    let (a, b) = (c.session(1), c.session(2));
    c.grant(a, "a", "r1");
    c.ok(Command::ExpireSession { session: a });
    c.acquire(b, "a", Mode::Exclusive, "r2", true);
    let counters: (std::collections::BTreeMap<(ShardKey, holdfast_core::LockName), u64>, u64) = ([((key(), name("a")), 7)].into(), 7);
    let owners = std::collections::BTreeMap::<SessionId, String>::new();
    let v3 = holdfast_core::codec::encode_versioned(b"HFCS", 3, &(&c.state, &owners, counters));
    let mut restored = CellState::restore(&v3).unwrap();
    assert!(restored.describe(&key(), &name("a")).unwrap().delayed);
    assert_eq!(restored.delay_begun(&key(), &name("a")), None, "the counter's number is not a record");
    assert_eq!(restored.queued_at(b, &rid("r2")), None);
    let lift = Command::EndLockDelayAt { shard: key(), name: name("a"), begun: FencingToken(7) };
    let applied = restored.apply(&Entry::new(0, lift));
    assert!(matches!(applied.events[..], [ref e] if e.session == b && matches!(e.kind, EventKind::Acquired { .. })), "{applied:?}");
}

#[test]
fn one_session_cannot_hold_and_wait_beyond_its_cap() {
    use holdfast_cell_state::MAX_HOLDS_AND_WAITS_PER_SESSION as CAP;
    let mut cfg = config(0);
    cfg.quotas.max_keys = 10 * CAP as u32;
    let mut c = Cell::with_config(cfg);
    let (greedy, other) = (c.session(1), c.session(2));
    // Half holds, half waits behind another session's holds.
    for i in 0..CAP / 2 {
        c.grant(greedy, &format!("h{i}"), &format!("h{i}"));
        c.grant(other, &format!("w{i}"), &format!("w{i}"));
        assert!(matches!(c.acquire(greedy, &format!("w{i}"), Mode::Exclusive, &format!("w{i}"), true), Outcome::Queued { .. }));
    }
    let over = c.acquire_cmd(greedy, "one-more", Mode::Exclusive, "x", false);
    assert_eq!(c.refused(over).code(), ErrorCode::QuotaExceeded);
    let over = c.acquire_cmd(greedy, "w0", Mode::Exclusive, "w0", true);
    assert!(matches!(c.apply(over).result, Ok(Outcome::Queued { .. })), "a retry of what it already asked for is still answered");
    c.grant(other, "free-for-others", "r");
}
