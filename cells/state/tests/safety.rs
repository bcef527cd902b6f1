//! The lock table's side of the safety holes of issue #42: a release is bound to the
//! session that holds the lock when it is applied, a seal ends the sessions that live
//! in the shard, and an acquire's outcome is remembered for a time, not a count.

mod common;

use common::*;
use holdfast_cell_state::{CellError, Command, EventKind, Outcome};
use holdfast_core::{EndReason, Epoch, ErrorCode, FencingToken, Mode, Revision, SessionId, ShardKey, ShardName};

/// Hole 3: the leader checked a release against the holder at proposal time only, and
/// the `Release` entry named no one; tokens are predictable, so a release of the next
/// token, checked before its grant and applied after, ended someone else's hold. The
/// entry now names the session, and the table applies it only if that session holds
/// the token then.
#[test]
fn a_release_ends_only_a_hold_of_the_session_it_names() {
    let mut c = Cell::new(0);
    let (h, w, m) = (c.session(1), c.session(2), c.session(3));
    let th = c.grant(h, "x", "h-1");
    c.acquire(w, "x", Mode::Exclusive, "w-1", true);
    // M sends a release of the next token while it is not held yet: bound to nobody
    // (the leader found no holder), or to M itself.
    let next = FencingToken(th.0 + 1);
    // H releases: W is granted the next token in the same apply.
    let applied = c.apply(Command::ReleaseHeld { shard: key(), name: name("x"), token: th, session: h });
    assert!(applied.events.iter().any(|e| e.session == w && e.kind == EventKind::Acquired { mode: Mode::Exclusive, token: next }), "{applied:?}");
    for by in [SessionId(0), m] {
        let err = c.refused(Command::ReleaseHeld { shard: key(), name: name("x"), token: next, session: by });
        assert_eq!(err, CellError::NotHolder { name: "x".into(), token: next, ended: None });
    }
    assert_eq!(c.state.holder_session(&key(), &name("x"), next), Some(w), "W's hold was ended by a release it did not send");
    // W's own release works, and repeating it is OK whoever repeats it.
    c.ok(Command::ReleaseHeld { shard: key(), name: name("x"), token: next, session: w });
    assert_eq!(c.ok(Command::ReleaseHeld { shard: key(), name: name("x"), token: next, session: SessionId(0) }), Outcome::Released { token: next });
}

/// A smaller hole of #42: sealing a shard left the sessions homed in it alive, so a
/// move away and back within their TTL revived them, renewals and all, while their
/// holds had ended with the seal. A seal now ends them; their holds elsewhere in the
/// cell end as expired (with the lock-delay: their holders learn it only at their
/// next renewal).
#[test]
fn a_seal_ends_the_sessions_homed_in_the_shard_and_a_move_back_does_not_revive_them() {
    let mut c = Cell::new(2_000);
    let other = ShardKey::new(ns(), ShardName::new("other").unwrap());
    c.ok(Command::AdoptShard { shard: other.clone(), epoch: Epoch(1), delayed_locks: vec![] });
    let (s, kept) = (c.session(1), SessionId(2));
    c.ok(Command::CreateSession { shard: other.clone(), session: kept, ttl_ms: 3_000, label: "elsewhere".into() });
    c.grant(s, "x", "s-1");
    let elsewhere = Command::Acquire {
        shard: other.clone(),
        epoch: Some(Epoch(1)),
        name: name("y"),
        session: s,
        mode: Mode::Exclusive,
        request_id: rid("s-2"),
        value: vec![],
        wait: false,
    };
    let Outcome::Granted { token: ty } = c.ok(elsewhere) else { panic!() };

    let applied = c.apply(Command::SealShard { shard: key(), epoch: Epoch(1) });
    assert!(applied.result.is_ok());
    assert!(c.state.session(s).is_none(), "a session homed in the sealed shard outlived the seal");
    assert!(c.state.session(kept).is_some(), "a session of another shard ended");
    assert!(applied.events.iter().any(|e| e.kind == EventKind::Ended { token: ty, reason: EndReason::Expired }), "{applied:?}");
    assert!(c.state.lock_delayed(&other, &name("y")), "its hold elsewhere ended without a lock-delay");
    assert_eq!(c.refused(Command::ClearCheckpoint { session: s }), CellError::SessionExpired(s, EndReason::Moved));

    // The shard comes back at the next epoch, within the session's TTL: still dead.
    c.ok(Command::AdoptShard { shard: key(), epoch: Epoch(2), delayed_locks: vec![] });
    c.epoch = Epoch(2);
    let cmd = c.acquire_cmd(s, "x", Mode::Exclusive, "s-3", false);
    assert_eq!(c.refused(cmd).code(), ErrorCode::SessionExpired);
}

/// A smaller hole of #42: finished acquires were remembered 64 to a session, so the
/// retry of an older one was granted again. They are now remembered until the leader
/// forgets them, by the revision at which they ended, however many came after.
#[test]
fn an_acquire_is_remembered_by_time_not_by_count() {
    let mut c = Cell::new(0);
    let s = c.session(1);
    let first = c.grant(s, "k", "r-0");
    c.ok(Command::ReleaseHeld { shard: key(), name: name("k"), token: first, session: s });
    let ended_at = c.state.revision();
    for i in 1..=200 {
        let t = c.grant(s, "k", &format!("r-{i}"));
        c.ok(Command::ReleaseHeld { shard: key(), name: name("k"), token: t, session: s });
    }
    let retry = c.acquire_cmd(s, "k", Mode::Exclusive, "r-0", false);
    assert_eq!(c.ok(retry.clone()), Outcome::HoldEnded { token: first, reason: EndReason::Released }, "a retry 200 acquires later was granted again");

    // The leader forgets what ended at or before a revision: r-0 only.
    assert!(!c.state.forgettable(Revision(ended_at.0 - 1)));
    assert!(c.state.forgettable(ended_at));
    assert_eq!(c.ok(Command::ForgetRequests { through: ended_at }), Outcome::Forgotten { requests: 1 });
    let r1 = c.acquire_cmd(s, "k", Mode::Exclusive, "r-1", false);
    assert!(matches!(c.ok(r1), Outcome::HoldEnded { .. }), "a record after the revision was forgotten");
    // Past its window, the id is a new request.
    assert!(matches!(c.ok(retry), Outcome::Granted { .. }));
    // Forgetting is the same on a replica restored from a snapshot.
    let through = c.state.revision();
    let mut replica = holdfast_cell_state::CellState::restore(&c.state.snapshot()).unwrap();
    assert_eq!(replica, c.state);
    let here = c.ok(Command::ForgetRequests { through });
    let there = replica.apply(&holdfast_cell_state::Entry::new(0, Command::ForgetRequests { through })).result.unwrap();
    assert_eq!(here, there);
    assert_eq!(here, Outcome::Forgotten { requests: 200 });
}
