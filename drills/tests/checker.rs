//! The safety checker: a clean history, one planted violation of each kind, histories
//! whose only "violation" needs an unknown operation to be absent, and a property test
//! over random legal histories of a single fenced lock with a mutation that must go red.

use holdfast_core::{CellId, EndReason, Epoch, FencingToken, LockName, NamespaceName, RegionId, Seq, SessionId, ShardName};
use holdfast_drills::checker::{check, CheckReport, ViolationKind};
use holdfast_drills::history::{EventKind, FaultKind, History, LockKey, OpId, SessionRef};
use proptest::prelude::*;

fn lock(name: &str) -> LockKey {
    LockKey { ns: NamespaceName::new("payments").unwrap(), name: LockName::new(name).unwrap() }
}

fn session(id: u64) -> SessionRef {
    SessionRef { cell: CellId::new("us-east-1").unwrap(), id: SessionId(id) }
}

fn tok(epoch: u32, seq: u64) -> FencingToken {
    FencingToken::new(Epoch(epoch), Seq(seq)).unwrap()
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Answer {
    Ok,
    Failed,
    Unknown,
    /// No completion line at all (the drill ended first).
    Silent,
}

/// Builds a history one line at a time, 10 ms apart.
#[derive(Default)]
struct Rec {
    h: History,
    t: u64,
    op: u64,
}

impl Rec {
    fn ev(&mut self, kind: EventKind) {
        self.t += 10;
        self.h.push(self.t, 1_700_000_000_000 + self.t, kind);
    }
    fn op(&mut self) -> OpId {
        self.op += 1;
        OpId(self.op)
    }
    fn invoke_grant(&mut self, l: &LockKey, s: u64) -> OpId {
        let op = self.op();
        self.ev(EventKind::GrantInvoked { op, lock: l.clone(), session: session(s) });
        op
    }
    fn answer_grant(&mut self, op: OpId, l: &LockKey, s: u64, token: FencingToken, a: Answer) {
        match a {
            Answer::Ok => self.ev(EventKind::GrantOk {
                op,
                lock: l.clone(),
                session: session(s),
                token,
                region: RegionId::new("us-east").unwrap(),
                cell: CellId::new("us-east-1").unwrap(),
            }),
            Answer::Failed => self.ev(EventKind::GrantFailed { op, code: "LOCK_HELD".into() }),
            Answer::Unknown => self.ev(EventKind::GrantUnknown { op }),
            Answer::Silent => {}
        }
    }
    fn grant(&mut self, l: &LockKey, s: u64, token: FencingToken, a: Answer) {
        let op = self.invoke_grant(l, s);
        self.answer_grant(op, l, s, token, a);
    }
    fn invoke_write(&mut self, l: &LockKey, token: FencingToken) -> OpId {
        let op = self.op();
        self.ev(EventKind::WriteAttempt { op, lock: l.clone(), token, resource: "ledger".into() });
        op
    }
    fn answer_write(&mut self, op: OpId, a: Answer) {
        match a {
            Answer::Ok => self.ev(EventKind::WriteAccepted { op }),
            Answer::Failed => self.ev(EventKind::WriteRejected { op }),
            Answer::Unknown => self.ev(EventKind::WriteUnknown { op }),
            Answer::Silent => {}
        }
    }
    fn write(&mut self, l: &LockKey, token: FencingToken, a: Answer) {
        let op = self.invoke_write(l, token);
        self.answer_write(op, a);
    }
    fn release(&mut self, l: &LockKey, s: u64, token: FencingToken, a: Answer) {
        let op = self.op();
        self.ev(EventKind::ReleaseInvoked { op, lock: l.clone(), session: session(s), token });
        match a {
            Answer::Ok => self.ev(EventKind::ReleaseOk { op }),
            Answer::Failed => self.ev(EventKind::ReleaseFailed { op, code: "NOT_HOLDER".into() }),
            Answer::Unknown => self.ev(EventKind::ReleaseUnknown { op }),
            Answer::Silent => {}
        }
    }
    fn observe(&mut self, l: &LockKey, epoch: u32, holders: Vec<FencingToken>) {
        let since_ms = self.t + 1;
        self.ev(EventKind::HolderObserved { lock: l.clone(), since_ms, epoch: Epoch(epoch), holders });
    }
    fn expired(&mut self, s: u64) {
        let at_ms = self.t;
        self.ev(EventKind::SessionExpired { session: session(s), at_ms });
    }
    /// The registry's watch: `payments/default` owned by `cell` at `epoch`.
    fn owner(&mut self, cell: &str, epoch: u32) {
        self.ev(EventKind::OwnerObserved {
            ns: NamespaceName::new("payments").unwrap(),
            shard: ShardName::default_shard(),
            cell: Some(CellId::new(cell).unwrap()),
            epoch: Epoch(epoch),
            moving_to: None,
        });
    }
    fn serving(&mut self, cell: &str, epoch: u32, from_ms: u64, until_ms: Option<u64>) {
        self.ev(EventKind::CellServing {
            cell: CellId::new(cell).unwrap(),
            ns: NamespaceName::new("payments").unwrap(),
            shard: ShardName::default_shard(),
            epoch: Epoch(epoch),
            from_ms,
            until_ms,
        });
    }
}

/// A drill in miniature: a holder, a failover with an epoch bump, a new holder whose
/// writes win, the old holder's stale write refused, clean releases and expiries.
fn clean() -> Rec {
    let l = lock("batch-9921");
    let mut r = Rec::default();
    r.serving("us-east-1", 1, 0, Some(500));
    r.grant(&l, 1, tok(1, 50311), Answer::Ok);
    r.write(&l, tok(1, 50311), Answer::Ok);
    r.observe(&l, 1, vec![tok(1, 50311)]);
    r.expired(1);
    r.grant(&l, 2, tok(1, 50312), Answer::Ok);
    r.write(&l, tok(1, 50312), Answer::Ok);
    r.write(&l, tok(1, 50311), Answer::Failed); // the zombie, fenced
    r.ev(EventKind::HoldEnded { lock: l.clone(), token: tok(1, 50312), reason: EndReason::Moved });
    r.serving("eu-west-1", 2, 600, None);
    r.grant(&l, 3, tok(2, 1), Answer::Ok);
    r.write(&l, tok(2, 1), Answer::Ok);
    r.write(&l, tok(1, 50312), Answer::Failed);
    r.observe(&l, 2, vec![tok(2, 1)]);
    r.release(&l, 3, tok(2, 1), Answer::Ok);
    r.observe(&l, 2, vec![]);
    r
}

fn only(report: &CheckReport, kind: ViolationKind) {
    assert!(report.malformed.is_empty(), "{:?}", report.malformed);
    assert_eq!(report.violations.len(), 1, "{:#?}", report.violations);
    assert_eq!(report.violations[0].kind, kind, "{:#?}", report.violations);
}

#[test]
fn a_clean_history_has_no_violations() {
    let r = clean();
    let report = check(&r.h);
    assert!(report.is_clean(), "{report:#?}");
    // And survives the file format.
    assert!(check(&History::from_jsonl(&r.h.to_jsonl()).unwrap()).is_clean());
}

#[test]
fn planted_stale_write_is_found() {
    let l = lock("batch-9921");
    let mut r = clean();
    // The unfenced ledger of docs/design.md's zombie holder: the zombie's write is accepted.
    r.write(&l, tok(1, 50311), Answer::Ok);
    let report = check(&r.h);
    only(&report, ViolationKind::StaleWriteAccepted);
    let v = &report.violations[0];
    assert_eq!(v.events.len(), 4);
    assert!(v.summary.contains(&tok(1, 50311).to_string()), "{}", v.summary);
    assert!(v.summary.contains(&tok(2, 1).to_string()), "{}", v.summary);
}

#[test]
fn stale_writes_at_different_resources_or_locks_are_not_compared() {
    let mut r = clean();
    let op = r.op();
    r.ev(EventKind::WriteAttempt { op, lock: lock("batch-9921"), token: tok(1, 1), resource: "other".into() });
    r.ev(EventKind::WriteAccepted { op });
    r.write(&lock("another-lock"), tok(1, 1), Answer::Ok);
    assert!(check(&r.h).is_clean());
}

#[test]
fn planted_token_that_did_not_grow_is_found() {
    let l = lock("batch-9921");
    let mut r = clean();
    r.grant(&l, 4, tok(2, 1), Answer::Ok); // a cell forced to grant twice
    only(&check(&r.h), ViolationKind::TokenDidNotGrow);
}

#[test]
fn the_same_grant_answered_to_a_retry_is_one_grant() {
    let l = lock("batch-9921");
    let mut r = Rec::default();
    r.grant(&l, 1, tok(1, 5), Answer::Ok);
    r.grant(&l, 1, tok(1, 5), Answer::Ok);
    assert!(check(&r.h).is_clean());
}

#[test]
fn planted_grant_after_expiry_is_found() {
    let l = lock("batch-9921");
    let mut r = clean();
    r.grant(&l, 1, tok(2, 7), Answer::Ok); // session 1 expired long ago
    only(&check(&r.h), ViolationKind::GrantAfterExpiry);
}

#[test]
fn planted_lost_grant_is_found() {
    let l = lock("batch-9921");
    let mut r = clean();
    r.grant(&l, 5, tok(2, 2), Answer::Ok);
    r.ev(EventKind::FaultInjected { kind: holdfast_drills::history::FaultKind::KillCellLeader, target: "eu-west-1".into() });
    r.observe(&l, 2, vec![]);
    only(&check(&r.h), ViolationKind::AcknowledgedGrantLost);
}

#[test]
fn planted_two_cells_serving_is_found() {
    let mut r = clean();
    r.serving("ap-south-1", 2, 700, Some(900)); // inside eu-west-1's open interval
    only(&check(&r.h), ViolationKind::TwoCellsServing);
    // Touching intervals do not overlap; another epoch is another owner.
    let mut r = clean();
    r.serving("ap-south-1", 1, 500, Some(550));
    r.serving("ap-south-1", 3, 700, None);
    assert!(check(&r.h).is_clean());
}

/// Issue #15, item 2: a cell granting at an epoch after the registry moved the shard
/// on, to an Acquire sent after the move was seen.
#[test]
fn planted_grant_after_ownership_ended_is_found() {
    let l = lock("settle-7");
    let mut r = clean();
    r.owner("us-east-1", 1);
    let in_flight = r.invoke_grant(&l, 7);
    r.owner("eu-west-1", 2);
    // Sent while us-east-1 still owned the shard, answered after: allowed.
    r.answer_grant(in_flight, &l, 7, tok(1, 60_000), Answer::Ok);
    assert!(check(&r.h).is_clean(), "{:#?}", check(&r.h).violations);
    // Sent after the watch showed epoch 2: us-east-1 must have refused it.
    r.grant(&l, 8, tok(1, 60_001), Answer::Ok);
    only(&check(&r.h), ViolationKind::GrantAfterOwnershipEnded);
}

/// A recovered registry raises every epoch without a seal (issue #44): the owner it
/// names serves its old epoch until its next renewal. The watch showing the shard at
/// a later epoch at the same cell does not end that cell's ownership of the earlier
/// one; a later epoch at another cell still does.
#[test]
fn an_epoch_raised_at_the_same_cell_does_not_end_its_ownership_of_the_old_one() {
    let l = lock("settle-9");
    let mut r = clean();
    r.owner("us-east-1", 1);
    r.owner("us-east-1", 1_001);
    r.grant(&l, 7, tok(1, 60_000), Answer::Ok);
    r.grant(&l, 8, tok(1_001, 1), Answer::Ok);
    assert!(check(&r.h).is_clean(), "{:#?}", check(&r.h).violations);
    r.owner("eu-west-1", 1_002);
    r.grant(&l, 9, tok(1, 60_001), Answer::Ok);
    let found = check(&r.h);
    assert!(found.violations.iter().any(|v| v.kind == ViolationKind::GrantAfterOwnershipEnded), "{:#?}", found.violations);
}

/// The same invariant on the servers' own moments (the simulation, one clock for all
/// hosts): a cell's grant at epoch 1 stamped after the registry committed the shard's
/// transfer to epoch 2, however late any worker heard of either.
#[test]
fn a_grant_stamped_after_the_registry_transferred_the_shard_is_found() {
    let l = lock("settle-7");
    let transferred = |cell: &str, epoch: u32| EventKind::ShardTransferred {
        ns: l.ns.clone(),
        shard: ShardName::default_shard(),
        cell: CellId::new(cell).unwrap(),
        epoch: Epoch(epoch),
    };
    let mut r = clean();
    r.owner("us-east-1", 1);
    r.ev(EventKind::CellGranted { lock: l.clone(), token: tok(1, 60_000) });
    r.ev(transferred("eu-west-1", 2));
    // Granted at the new epoch: allowed; the old token answered again later (a retry)
    // counts at its first moment.
    r.ev(EventKind::CellGranted { lock: l.clone(), token: tok(2, 1) });
    r.ev(EventKind::CellGranted { lock: l.clone(), token: tok(1, 60_000) });
    r.ev(EventKind::CellHoldEnded { lock: l.clone(), token: tok(1, 60_000), session: SessionId(1), reason: EndReason::Moved });
    assert!(check(&r.h).is_clean(), "{:#?}", check(&r.h).violations);
    // A new grant at epoch 1 after the transfer: the old owner kept granting.
    r.ev(EventKind::CellGranted { lock: l.clone(), token: tok(1, 60_001) });
    only(&check(&r.h), ViolationKind::GrantAfterOwnershipEnded);
    // The registry's own record ends the epoch even when no watch saw the shard at 1.
    let mut r = clean();
    r.ev(transferred("us-east-1", 1));
    r.ev(transferred("eu-west-1", 2));
    r.ev(EventKind::CellGranted { lock: l.clone(), token: tok(1, 7) });
    only(&check(&r.h), ViolationKind::GrantAfterOwnershipEnded);
}

/// The simulation's stamps: a cell's grant while an earlier token of the same lock and
/// epoch had not ended in the cell is two holders. The same grant after that end is
/// not, nor is a repeated answer, nor a grant at a later epoch (a move abandons the
/// old epoch's holds).
#[test]
fn a_grant_stamped_while_an_earlier_hold_lives_is_two_holders() {
    let l = lock("settle-8");
    let granted = |token| EventKind::CellGranted { lock: l.clone(), token };
    let ended = |token| EventKind::CellHoldEnded { lock: l.clone(), token, session: SessionId(1), reason: EndReason::Expired };
    let mut r = clean();
    r.ev(granted(tok(1, 100)));
    r.ev(ended(tok(1, 100)));
    // Another replica applies the same end later.
    r.ev(ended(tok(1, 100)));
    r.ev(granted(tok(1, 101)));
    // Answered again to a retry: the same hold.
    r.ev(granted(tok(1, 101)));
    // The shard moved without a seal: epoch 2 starts while 101 was never ended.
    r.ev(granted(tok(2, 1)));
    r.ev(ended(tok(2, 1)));
    // Ended before the grant was answered: the late answer starts no hold.
    r.ev(ended(tok(2, 2)));
    r.ev(granted(tok(2, 2)));
    r.ev(granted(tok(2, 3)));
    assert!(check(&r.h).is_clean(), "{:#?}", check(&r.h).violations);
    // Granted while 2:3 holds.
    r.ev(granted(tok(2, 4)));
    only(&check(&r.h), ViolationKind::TwoHolders);
}

/// The simulation's stamps: a hold the cell ended as released needs its holder to
/// have asked first, by releasing that very token or closing its session. A release
/// with a stale token that ends the current holder's hold is the bug this finds.
#[test]
fn a_hold_released_that_nobody_asked_to_release_is_found() {
    let l = lock("settle-9");
    let ended = |token, session, reason| EventKind::CellHoldEnded { lock: l.clone(), token, session: SessionId(session), reason };
    let mut r = clean();
    r.ev(EventKind::CellGranted { lock: l.clone(), token: tok(1, 10) });
    r.release(&l, 1, tok(1, 10), Answer::Silent);
    r.ev(ended(tok(1, 10), 1, EndReason::Released));
    // Every replica stamps it; the first line counts.
    r.ev(ended(tok(1, 10), 1, EndReason::Released));
    r.ev(EventKind::CellGranted { lock: l.clone(), token: tok(1, 11) });
    r.ev(EventKind::SessionCloseInvoked { session: session(2) });
    r.ev(ended(tok(1, 11), 2, EndReason::Released));
    // Ended by expiry: nobody needs to ask.
    r.ev(EventKind::CellGranted { lock: l.clone(), token: tok(1, 12) });
    r.ev(ended(tok(1, 12), 3, EndReason::Expired));
    r.ev(EventKind::CellGranted { lock: l.clone(), token: tok(1, 13) });
    assert!(check(&r.h).is_clean(), "{:#?}", check(&r.h).violations);
    // Session 3's late release of its expired token 12 ends token 13's hold instead;
    // 13's own release comes only afterwards.
    r.release(&l, 3, tok(1, 12), Answer::Failed);
    r.ev(ended(tok(1, 13), 4, EndReason::Released));
    r.release(&l, 4, tok(1, 13), Answer::Failed);
    only(&check(&r.h), ViolationKind::ReleaseNotAsked);
}

/// The simulation's stamps: after a hold ends any way but a release (or a move), its
/// lock is granted to no one at that epoch for the namespace's lock-delay.
#[test]
fn a_grant_within_the_lock_delay_is_found() {
    let l = lock("settle-10");
    let granted = |token| EventKind::CellGranted { lock: l.clone(), token };
    let ended = |token, reason| EventKind::CellHoldEnded { lock: l.clone(), token, session: SessionId(1), reason };
    let mut r = clean();
    r.ev(EventKind::LockDelaySet { ns: l.ns.clone(), ms: 1_000 });
    r.ev(granted(tok(1, 20)));
    r.ev(EventKind::SessionCloseInvoked { session: session(1) });
    // Released: no delay.
    r.ev(ended(tok(1, 20), EndReason::Released));
    r.ev(granted(tok(1, 21)));
    r.ev(ended(tok(1, 21), EndReason::Expired));
    // The delay ran out (the recorder steps 10 ms a line).
    r.t += 1_000 - 10;
    r.ev(granted(tok(1, 22)));
    // Moved: the next grant is at the next epoch, in another cell.
    r.ev(ended(tok(1, 22), EndReason::Moved));
    r.ev(granted(tok(2, 1)));
    assert!(check(&r.h).is_clean(), "{:#?}", check(&r.h).violations);
    r.ev(ended(tok(2, 1), EndReason::Expired));
    r.t += 900;
    r.ev(granted(tok(2, 2)));
    only(&check(&r.h), ViolationKind::GrantDuringLockDelay);
    // Without a lock-delay the same grant is fine.
    let mut r = clean();
    r.ev(EventKind::LockDelaySet { ns: l.ns.clone(), ms: 0 });
    r.ev(granted(tok(2, 1)));
    r.ev(ended(tok(2, 1), EndReason::Expired));
    r.ev(granted(tok(2, 2)));
    assert!(check(&r.h).is_clean(), "{:#?}", check(&r.h).violations);
}

/// The lock-delay is measured on the cell leader's clock, which may run fast by the
/// stated bound on clock rates (0.1 %, `holdfast_core::clock_rate_allowance`): a grant
/// that much early is none of a violation, a millisecond more is.
#[test]
fn the_lock_delay_allows_the_clock_rate_bound_and_no_more() {
    let l = lock("settle-10b");
    for (after, fine) in [(9_990, true), (9_989, false)] {
        let mut r = clean();
        r.ev(EventKind::LockDelaySet { ns: l.ns.clone(), ms: 10_000 });
        r.ev(EventKind::CellGranted { lock: l.clone(), token: tok(1, 1) });
        r.ev(EventKind::CellHoldEnded { lock: l.clone(), token: tok(1, 1), session: SessionId(1), reason: EndReason::Expired });
        // The recorder steps 10 ms a line.
        r.t += after - 10;
        r.ev(EventKind::CellGranted { lock: l.clone(), token: tok(1, 2) });
        let report = check(&r.h);
        if fine {
            assert!(report.is_clean(), "a grant {after} ms after: {:#?}", report.violations);
        } else {
            only(&report, ViolationKind::GrantDuringLockDelay);
        }
    }
}

/// The simulation's stamps: no replica applies a grant to a session after a replica
/// applied that session's end (a dead waiter granted: a lock held for good).
#[test]
fn a_grant_applied_after_its_session_ended_is_found() {
    let l = lock("settle-11");
    // Revision 0: no log order known, which the queue check skips.
    let began = |token, s| EventKind::CellHoldBegan { lock: l.clone(), token, session: SessionId(s), revision: 0 };
    let ended = |token, s| EventKind::CellHoldEnded { lock: l.clone(), token, session: SessionId(s), reason: EndReason::Expired };
    let session_ended = |s| EventKind::CellSessionEnded { session: SessionId(s) };
    let mut r = clean();
    r.ev(began(tok(1, 30), 1));
    r.ev(ended(tok(1, 30), 1));
    r.ev(session_ended(1));
    // A slower replica applies the same grant and end afterwards: its first line counts.
    r.ev(began(tok(1, 30), 1));
    r.ev(ended(tok(1, 30), 1));
    r.ev(session_ended(1));
    r.ev(began(tok(1, 31), 2));
    assert!(check(&r.h).is_clean(), "{:#?}", check(&r.h).violations);
    // Session 1 was queued again, and its waiter outlived it.
    r.ev(ended(tok(1, 31), 2));
    r.ev(began(tok(1, 32), 1));
    only(&check(&r.h), ViolationKind::GrantToEndedSession);
}

/// The simulation's stamps: the queue of a lock, rebuilt per epoch from every
/// replica's lines in the cell's revision order, is served from its front (FIFO
/// without barging).
#[test]
fn a_grant_out_of_queue_order_is_found() {
    let l = lock("settle-12");
    let queued = |epoch, s, revision| EventKind::CellWaiterQueued { lock: l.clone(), epoch: Epoch(epoch), session: SessionId(s), revision };
    let left = |epoch, s, revision| EventKind::CellWaiterLeft { lock: l.clone(), epoch: Epoch(epoch), session: SessionId(s), revision };
    let began = |token, s, revision| EventKind::CellHoldBegan { lock: l.clone(), token, session: SessionId(s), revision };
    let mut r = clean();
    r.ev(began(tok(1, 1), 1, 10));
    r.ev(queued(1, 2, 11));
    r.ev(queued(1, 3, 12));
    r.ev(queued(1, 4, 13));
    // Session 2's wait ran out; session 3 is next. A slower replica's lines come later
    // and say the same.
    r.ev(left(1, 2, 14));
    r.ev(began(tok(1, 2), 3, 16));
    r.ev(queued(1, 2, 11));
    r.ev(queued(1, 3, 12));
    // The same session queued again at another epoch is another queue.
    r.ev(queued(2, 3, 5));
    r.ev(began(tok(2, 1), 3, 6));
    assert!(check(&r.h).is_clean(), "{:#?}", check(&r.h).violations);
    let fifo = r.h.clone();

    // The lines of a fast replica after the grant, of a slow one before: the log's
    // order (the revision) decides, not the lines'. Here session 5 came after 4.
    r.ev(queued(1, 5, 17));
    r.ev(began(tok(1, 3), 5, 19));
    let report = check(&r.h);
    only(&report, ViolationKind::GrantOutOfQueueOrder);
    assert!(report.violations[0].summary.contains("session s4"), "{}", report.violations[0].summary);

    // Barging: a grant at once to a session that never queued, while session 4 waits.
    let mut r = Rec { h: fifo, ..Rec::default() };
    r.t = r.h.end_ms();
    r.ev(began(tok(1, 3), 9, 20));
    only(&check(&r.h), ViolationKind::GrantOutOfQueueOrder);
}

/// A bound on liveness, from the same stamps: a waiter leaves its queue within the
/// run's bound of its queueing or of the latest rebuild of a leader's timers.
#[test]
fn a_waiter_that_outstays_its_bound_is_found() {
    let l = lock("settle-12");
    let queued = |s, revision| EventKind::CellWaiterQueued { lock: l.clone(), epoch: Epoch(1), session: SessionId(s), revision };
    let left = |s, revision| EventKind::CellWaiterLeft { lock: l.clone(), epoch: Epoch(1), session: SessionId(s), revision };
    let began = |token, s, revision| EventKind::CellHoldBegan { lock: l.clone(), token, session: SessionId(s), revision };
    let mut r = clean();
    r.ev(EventKind::WaitsBounded { ms: 100 });
    r.ev(began(tok(1, 1), 1, 10));
    // Session 2 waits 180 ms, but a new leader rebuilt the timers halfway.
    r.ev(queued(2, 11));
    r.t += 80;
    r.ev(EventKind::CellTimersRestarted);
    r.t += 80;
    r.ev(began(tok(1, 2), 2, 12));
    // Session 3 leaves at 100 ms, just within the bound; a slow replica's line of its
    // queueing, much later, does not move it.
    r.ev(queued(3, 13));
    r.t += 90;
    r.ev(left(3, 14));
    r.ev(queued(3, 13));
    assert!(check(&r.h).is_clean(), "{:#?}", check(&r.h).violations);

    // A cell cut off from the registry holds its timers until the cut heals: a heal
    // counts as a rebuild. Session 6 waits 160 ms with such a heal halfway; the heal
    // of another fault (a partition) would not excuse it.
    let cut = |kind| EventKind::FaultInjected { kind, target: "us-east-1".into() };
    r.ev(cut(FaultKind::CutFromRegistry));
    r.ev(queued(6, 15));
    r.t += 70;
    r.ev(cut(FaultKind::Heal));
    r.t += 70;
    r.ev(left(6, 16));
    assert!(check(&r.h).is_clean(), "{:#?}", check(&r.h).violations);
    let within = r.h.clone();
    let mut partitioned = r.h.clone();
    for e in &mut partitioned.events {
        if e.kind == cut(FaultKind::CutFromRegistry) {
            e.kind = cut(FaultKind::PartitionRegion);
        }
    }
    only(&check(&partitioned), ViolationKind::WaiterOutstayed);

    // Session 4 waits 160 ms with no rebuild.
    r.ev(queued(4, 17));
    r.t += 150;
    r.ev(left(4, 18));
    let report = check(&r.h);
    only(&report, ViolationKind::WaiterOutstayed);
    assert!(report.violations[0].summary.contains("160 ms"), "{}", report.violations[0].summary);

    // Session 5 is still queued when the run ends, 200 ms on.
    let mut r = Rec { h: within.clone(), ..Rec::default() };
    r.t = r.h.end_ms();
    r.ev(queued(5, 17));
    r.t += 190;
    r.ev(EventKind::SessionCloseInvoked { session: session(1) });
    let report = check(&r.h);
    only(&report, ViolationKind::WaiterOutstayed);
    assert!(report.violations[0].summary.contains("still queued"), "{}", report.violations[0].summary);

    // Without a bound in the history (a drill's, or an older run's) nothing is checked.
    let mut unbounded = r.h.clone();
    unbounded.events.retain(|e| !matches!(e.kind, EventKind::WaitsBounded { .. }));
    assert!(check(&unbounded).is_clean());
}

#[test]
fn violations_that_need_an_unknown_op_to_be_absent_are_not_reported() {
    let l = lock("batch-9921");

    // A higher write whose answer never came, then a lower one accepted: the higher
    // one may have been refused or never applied.
    let mut r = Rec::default();
    r.write(&l, tok(1, 9), Answer::Unknown);
    r.write(&l, tok(1, 3), Answer::Ok);
    r.write(&l, tok(1, 10), Answer::Silent);
    r.write(&l, tok(1, 4), Answer::Ok);
    // A lower write after an accepted higher one, with no answer: may not have applied.
    r.write(&l, tok(1, 11), Answer::Ok);
    r.write(&l, tok(1, 5), Answer::Unknown);
    assert!(check(&r.h).is_clean(), "{:#?}", check(&r.h));

    // A grant that timed out need not exist: a later, lower definite grant is fine.
    let mut r = Rec::default();
    r.grant(&l, 1, tok(1, 9), Answer::Unknown);
    r.grant(&l, 2, tok(1, 3), Answer::Ok);
    // A timed-out grant to an expired session may not have been made.
    r.expired(2);
    r.grant(&l, 2, tok(1, 12), Answer::Unknown);
    assert!(check(&r.h).is_clean(), "{:#?}", check(&r.h));

    // A hold missing from a read after a release that timed out: the release may have
    // happened. A missing hold whose grant timed out was never acknowledged.
    let mut r = Rec::default();
    r.grant(&l, 1, tok(1, 1), Answer::Ok);
    r.release(&l, 1, tok(1, 1), Answer::Unknown);
    r.grant(&l, 2, tok(1, 2), Answer::Unknown);
    r.observe(&l, 1, vec![]);
    assert!(check(&r.h).is_clean(), "{:#?}", check(&r.h));

    // A read sent before the grant was acknowledged may be linearized before it.
    let mut r = Rec::default();
    let op = r.invoke_grant(&l, 1);
    let since_ms = r.t;
    r.answer_grant(op, &l, 1, tok(1, 1), Answer::Ok);
    r.ev(EventKind::HolderObserved { lock: l.clone(), since_ms, epoch: Epoch(1), holders: vec![] });
    assert!(check(&r.h).is_clean(), "{:#?}", check(&r.h));

    // Overlapping in time is not ordered: the lower write may have been applied first.
    let mut r = Rec::default();
    let high = r.invoke_write(&l, tok(1, 9));
    let low = r.invoke_write(&l, tok(1, 3));
    r.answer_write(high, Answer::Ok);
    r.answer_write(low, Answer::Ok);
    assert!(check(&r.h).is_clean(), "{:#?}", check(&r.h));
}

#[test]
fn violations_that_hold_whichever_way_the_unknowns_went_are_reported() {
    let l = lock("batch-9921");
    let mut r = Rec::default();
    r.write(&l, tok(1, 9), Answer::Ok);
    r.write(&l, tok(1, 10), Answer::Unknown);
    r.write(&l, tok(1, 3), Answer::Ok);
    let report = check(&r.h);
    only(&report, ViolationKind::StaleWriteAccepted);
    // The witness is the definitely accepted write, never the unknown one.
    assert!(report.violations[0].summary.contains(&tok(1, 9).to_string()));
}

#[test]
fn a_completion_without_invocation_is_malformed() {
    let mut r = Rec::default();
    r.ev(EventKind::WriteAccepted { op: OpId(77) });
    let report = check(&r.h);
    assert!(report.violations.is_empty());
    assert_eq!(report.malformed.len(), 1, "{report:#?}");
}

// ---- property test: random legal histories of one fenced lock ----

#[derive(Clone, Debug)]
enum Step {
    /// A new session acquires; the answer may be lost.
    Grant { unknown: bool },
    /// The holder `back` grants ago (0 = the newest) writes; the answer may be lost.
    Write { back: usize, unknown: bool },
    /// The newest holder's session is seen expired.
    Expire,
    /// Read the holders.
    Observe,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => Just(Step::Grant { unknown: false }),
        1 => Just(Step::Grant { unknown: true }),
        6 => (0usize..4, prop::bool::weighted(0.2)).prop_map(|(back, unknown)| Step::Write { back, unknown }),
        1 => Just(Step::Expire),
        1 => Just(Step::Observe),
    ]
}

/// Runs the model: one exclusive lock whose grants carry growing tokens (a new grant
/// only after the previous holder expired), and a resource that accepts a write iff
/// its token is at least the highest it has accepted.
fn legal_history(steps: &[Step]) -> History {
    let l = lock("the-lock");
    let mut r = Rec::default();
    let mut next_seq = 1;
    let mut holders: Vec<(u64, FencingToken)> = Vec::new(); // (session, token), oldest first
    let mut current: Option<(u64, FencingToken)> = None; // acknowledged, not expired
    let mut max_accepted = FencingToken(0);
    // A prefix that guarantees two accepted writes with different tokens.
    let prefix = [Step::Grant { unknown: false }, Step::Write { back: 0, unknown: false }, Step::Expire];
    for s in prefix.iter().chain(prefix.iter()).chain(steps) {
        match *s {
            Step::Grant { unknown } => {
                if let Some((session, _)) = current.take() {
                    r.expired(session);
                }
                let session = next_seq + 100;
                let token = tok(1, next_seq);
                next_seq += 1;
                r.grant(&l, session, token, if unknown { Answer::Unknown } else { Answer::Ok });
                holders.push((session, token)); // an unknown grant still happened here
                if !unknown {
                    current = Some((session, token));
                }
            }
            Step::Write { back, unknown } => {
                let Some(&(_, token)) = holders.iter().rev().nth(back.min(holders.len().saturating_sub(1))) else {
                    continue;
                };
                let accepted = token >= max_accepted;
                if accepted {
                    max_accepted = token;
                }
                let answer = match (unknown, accepted) {
                    (true, _) => Answer::Unknown,
                    (false, true) => Answer::Ok,
                    (false, false) => Answer::Failed,
                };
                r.write(&l, token, answer);
            }
            Step::Expire => {
                if let Some((session, _)) = current.take() {
                    r.expired(session);
                }
            }
            Step::Observe => {
                let held = current.map(|(_, t)| vec![t]).unwrap_or_default();
                r.observe(&l, 1, held);
            }
        }
    }
    r.h
}

proptest! {
    #[test]
    fn legal_histories_pass(steps in prop::collection::vec(step(), 0..60)) {
        let h = legal_history(&steps);
        let report = check(&h);
        prop_assert!(report.is_clean(), "{:#?}\n{}", report, h.to_jsonl());
    }

    #[test]
    fn swapping_two_accepted_writes_is_caught(steps in prop::collection::vec(step(), 0..60), pick in any::<prop::sample::Index>()) {
        let mut h = legal_history(&steps);
        // Accepted writes: (line of the attempt, token).
        let accepted: Vec<(usize, FencingToken)> = h.events.iter().enumerate().filter_map(|(i, e)| match (&e.kind, h.events.get(i + 1).map(|n| &n.kind)) {
            (EventKind::WriteAttempt { op, token, .. }, Some(EventKind::WriteAccepted { op: done })) if op == done => Some((i, *token)),
            _ => None,
        }).collect();
        let pairs: Vec<(usize, usize)> = accepted.iter().enumerate().flat_map(|(a, &(i, ti))| {
            accepted[a + 1..].iter().filter(move |&&(_, tj)| ti < tj).map(move |&(j, _)| (i, j))
        }).collect();
        prop_assert!(!pairs.is_empty(), "the prefix guarantees two accepted writes with growing tokens");
        let (i, j) = *pick.get(&pairs);
        // Swap the two writes' order: the later (higher) write now lands first.
        let (ti, tj) = match (&h.events[i].kind, &h.events[j].kind) {
            (EventKind::WriteAttempt { token: ti, .. }, EventKind::WriteAttempt { token: tj, .. }) => (*ti, *tj),
            _ => unreachable!(),
        };
        if let EventKind::WriteAttempt { token, .. } = &mut h.events[i].kind { *token = tj; }
        if let EventKind::WriteAttempt { token, .. } = &mut h.events[j].kind { *token = ti; }
        let report = check(&h);
        prop_assert!(report.count(ViolationKind::StaleWriteAccepted) >= 1, "{:#?}\n{}", report, h.to_jsonl());
    }
}
