//! The safety checker: reads a whole [`History`] and reports every violation with the
//! lines involved.
//!
//! The oracle is honest about uncertainty (openraft's turmoil oracle): an operation
//! with no answer is *unknown* — it may or may not have taken effect. A violation is
//! reported only if it holds whichever way every unknown operation went; nothing is
//! reported that needs an unknown operation to be absent (or present).
//!
//! "A before B" always means: A's completion is on an earlier line than B's
//! invocation (see [`crate::history`]: line order is real-time order).
//!
//! Checked:
//! 1. [`ViolationKind::StaleWriteAccepted`]: for one lock at one resource, an accepted
//!    write with a lower token than an accepted write before it.
//! 2. [`ViolationKind::TokenDidNotGrow`]: for one lock, a granted token `<=` a token
//!    granted before it (the same token answered twice to the same session is one
//!    grant, answered to an idempotent retry).
//! 3. [`ViolationKind::GrantAfterExpiry`]: a grant to a session whose Acquire was sent
//!    after the session was seen expired.
//! 4. [`ViolationKind::AcknowledgedGrantLost`]: a read of a lock's holders, at the
//!    granting epoch and sent after the grant was acknowledged, that lacks the token —
//!    unless the hold may have ended first (a release sent before the read answered,
//!    a hold-ended event, or the session's expiry possibly before the read).
//! 5. [`ViolationKind::TwoCellsServing`]: two cells serving one shard at one epoch
//!    during overlapping intervals.
//! 6. [`ViolationKind::GrantAfterOwnershipEnded`]: a grant by cell C at epoch e whose
//!    Acquire was sent after the registry's watch showed every shard of the namespace
//!    that C owned at e at a later epoch **at another cell**. A cell stops granting
//!    before the registry moves a shard on (a seal, or the end of its ownership
//!    lease), so an Acquire that arrives afterwards must be refused. (A later epoch at
//!    C itself — a recovered registry raises every epoch — C reaches on its own, after
//!    sealing e.) In the simulation, where every host shares
//!    one clock, the same invariant is checked on the servers' own moments: a cell's
//!    grant at epoch e (`CellGranted`) after the registry committed the transfer of
//!    every shard of the namespace at e to a later epoch (`ShardTransferred`).
//! 7. [`ViolationKind::TwoHolders`]: the simulation only, on the servers' own
//!    moments: a cell's grant of a lock (`CellGranted`) while a token of the same
//!    lock, granted earlier at the same epoch, had not ended at any of its replicas
//!    (`CellHoldEnded`). Two exclusive holders by the cell's own state, which fencing
//!    would hide from the resource. A holder that merely does not know its lock
//!    ended (a paused process) is not this: its hold ended in the cell first. Per
//!    epoch, because a move that did not wait for a seal abandons the old epoch's
//!    holds on purpose (the new tokens are larger). The simulation's workers take
//!    exclusive locks only, which this check assumes.
//! 8. [`ViolationKind::ReleaseNotAsked`]: the simulation only: a hold that ended in
//!    the cell as released (`CellHoldEnded`, reason released) although nobody had
//!    asked for it: no Release of that very token and no close of its session was
//!    sent before. A release that ends another holder's hold (a stale token taken for
//!    the current one) is this, and fencing hides it too.
//! 9. [`ViolationKind::GrantDuringLockDelay`]: the simulation only: a grant of a lock
//!    at epoch e (`CellGranted`, a token above the ended one) less than the
//!    namespace's lock-delay (`LockDelaySet`) after a hold of it at e ended any way
//!    but a release or a move (`CellHoldEnded`): its holder may still be acting on
//!    the resource. The leader counts the delay from its own apply of the end, never
//!    before the first replica's, so a correct cell grants no earlier than this, less
//!    the part of the delay its clock may run fast by (0.1 %: 5 ms of 5 s).
//! 10. [`ViolationKind::GrantToEndedSession`]: the simulation only: a replica applied
//!     a grant to a session (`CellHoldBegan`) after a replica had applied that
//!     session's end (`CellSessionEnded`; the first line of each counts). Every
//!     replica applies one log in one order, and a session's end takes it out of every
//!     queue first, so a correct cell's first grant line always comes before the first
//!     end line. A grant to a dead waiter, which no call hears, holds the lock for good;
//!     only the replicas' own moments show it.
//! 11. [`ViolationKind::GrantOutOfQueueOrder`]: the simulation only: per lock and
//!     epoch, the queue rebuilt from the replicas' stamps in the log's order (the
//!     cell's revision; `CellWaiterQueued`, `CellWaiterLeft`, `CellHoldBegan`), a grant
//!     to a session other than the one at the front of the queue: FIFO without
//!     barging (docs/semantics.md). Per epoch, as one cell serves a shard at an epoch;
//!     a waiter carried over its shard's epoch bump in one cell (after 2^40 − 2^30
//!     grants of the shard) is not modelled.
//! 12. [`ViolationKind::WaiterOutstayed`]: the simulation only, and a bound on
//!     liveness rather than safety: a waiter that stayed in its queue (from the
//!     replicas' stamps, as in 11) longer than the run's bound (`WaitsBounded`)
//!     without a cell's leader rebuilding its timers meanwhile
//!     (`CellTimersRestarted`, from any cell) or the heal of a cut between a cell and
//!     the registry (whose timers wait, by design, for the ownership lease): a wait
//!     the leader never times out, which holds the lock's queue up for as long as its
//!     session lives. Until the history's end for a waiter still queued there.

use crate::history::{Event, EventKind, History, LockKey, OpId, SessionRef};
use holdfast_core::{CellId, EndReason, Epoch, FencingToken, NamespaceName, SessionId, ShardName};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

mod queues;

/// The kinds of violation, one per invariant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ViolationKind {
    StaleWriteAccepted,
    TokenDidNotGrow,
    GrantAfterExpiry,
    AcknowledgedGrantLost,
    TwoCellsServing,
    GrantAfterOwnershipEnded,
    TwoHolders,
    ReleaseNotAsked,
    GrantDuringLockDelay,
    GrantToEndedSession,
    GrantOutOfQueueOrder,
    WaiterOutstayed,
}

impl fmt::Display for ViolationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ViolationKind::StaleWriteAccepted => "stale write accepted",
            ViolationKind::TokenDidNotGrow => "token did not grow",
            ViolationKind::GrantAfterExpiry => "grant after expiry",
            ViolationKind::AcknowledgedGrantLost => "acknowledged grant lost",
            ViolationKind::TwoCellsServing => "two cells serving one shard at one epoch",
            ViolationKind::GrantAfterOwnershipEnded => "grant after the cell's ownership of its epoch ended",
            ViolationKind::TwoHolders => "two holders of an exclusive lock",
            ViolationKind::ReleaseNotAsked => "a hold released that nobody asked to release",
            ViolationKind::GrantDuringLockDelay => "a grant during the lock-delay",
            ViolationKind::GrantToEndedSession => "a grant to a session that had ended",
            ViolationKind::GrantOutOfQueueOrder => "a grant out of queue order",
            ViolationKind::WaiterOutstayed => "a waiter queued longer than its bound",
        })
    }
}

/// An event a violation involves, with its 1-based line in the history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventRef {
    pub line: usize,
    pub event: Event,
}

/// One broken invariant and the evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Violation {
    pub kind: ViolationKind,
    /// One sentence for a human.
    pub summary: String,
    /// The events that prove it, in line order.
    pub events: Vec<EventRef>,
}

/// What the checker found.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CheckReport {
    pub violations: Vec<Violation>,
    /// Problems with the history itself (a completion without its invocation, an op
    /// id used twice). Not safety violations, but the history cannot be fully trusted.
    pub malformed: Vec<String>,
}

impl CheckReport {
    pub fn is_clean(&self) -> bool {
        self.violations.is_empty() && self.malformed.is_empty()
    }

    pub fn count(&self, kind: ViolationKind) -> usize {
        self.violations.iter().filter(|v| v.kind == kind).count()
    }
}

/// How an operation ended, by the index of its completion line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Ok(usize),
    Failed,
    /// Answered `*Unknown`, or never answered.
    Unknown,
}

#[derive(Debug)]
struct Op {
    invoked: usize,
    outcome: Outcome,
}

/// Checks a whole history.
pub fn check(history: &History) -> CheckReport {
    let mut report = CheckReport::default();
    let ops = pair_ops(history, &mut report.malformed);
    let at = |i: usize| EventRef { line: i + 1, event: history.events[i].clone() };

    stale_writes(history, &ops, &at, &mut report.violations);
    tokens_grow(history, &ops, &at, &mut report.violations);
    grants_after_expiry(history, &ops, &at, &mut report.violations);
    grants_lost(history, &at, &mut report.violations);
    two_cells_serving(history, &at, &mut report.violations);
    grants_after_ownership(history, &ops, &at, &mut report.violations);
    two_holders(history, &at, &mut report.violations);
    releases_asked(history, &at, &mut report.violations);
    lock_delay_kept(history, &at, &mut report.violations);
    grants_to_ended_sessions(history, &at, &mut report.violations);
    queues::check(history, &at, &mut report.violations);
    report
}

fn pair_ops(history: &History, malformed: &mut Vec<String>) -> HashMap<OpId, Op> {
    let mut ops: HashMap<OpId, Op> = HashMap::new();
    for (i, e) in history.events.iter().enumerate() {
        let (op, completion) = match &e.kind {
            EventKind::GrantInvoked { op, .. } | EventKind::ReleaseInvoked { op, .. } | EventKind::WriteAttempt { op, .. } => (*op, None),
            EventKind::GrantOk { op, .. } | EventKind::ReleaseOk { op } | EventKind::WriteAccepted { op } => (*op, Some(Outcome::Ok(i))),
            EventKind::GrantFailed { op, .. } | EventKind::ReleaseFailed { op, .. } | EventKind::WriteRejected { op } => (*op, Some(Outcome::Failed)),
            EventKind::GrantUnknown { op } | EventKind::ReleaseUnknown { op } | EventKind::WriteUnknown { op } => (*op, Some(Outcome::Unknown)),
            _ => continue,
        };
        match (completion, ops.get_mut(&op)) {
            (None, None) => {
                ops.insert(op, Op { invoked: i, outcome: Outcome::Unknown });
            }
            (None, Some(_)) => malformed.push(format!("line {}: op {} invoked twice", i + 1, op.0)),
            (Some(_), None) => malformed.push(format!("line {}: op {} completed but never invoked", i + 1, op.0)),
            (Some(outcome), Some(existing)) => {
                // A later "unknown" never overrides a definite answer; a second
                // definite answer is a recorder bug.
                match (existing.outcome, outcome) {
                    (Outcome::Unknown, o) => existing.outcome = o,
                    (_, Outcome::Unknown) => {}
                    _ => malformed.push(format!("line {}: op {} completed twice", i + 1, op.0)),
                }
            }
        }
    }
    ops
}

struct AcceptedWrite {
    invoked: usize,
    accepted: usize,
    token: FencingToken,
}

fn stale_writes(history: &History, ops: &HashMap<OpId, Op>, at: &dyn Fn(usize) -> EventRef, out: &mut Vec<Violation>) {
    // Only definitely accepted writes count: an unknown write may have been refused
    // (so it proves nothing as the "higher" one) and may never have been applied (so
    // it proves nothing as the "lower" one).
    let mut groups: BTreeMap<(&LockKey, &str), Vec<AcceptedWrite>> = BTreeMap::new();
    for (i, e) in history.events.iter().enumerate() {
        if let EventKind::WriteAttempt { op, lock, token, resource } = &e.kind {
            if let Some(Op { outcome: Outcome::Ok(accepted), invoked }) = ops.get(op) {
                if *invoked == i {
                    groups.entry((lock, resource)).or_default().push(AcceptedWrite { invoked: i, accepted: *accepted, token: *token });
                }
            }
        }
    }
    for ((lock, resource), writes) in groups {
        // Sweep: writes by invocation; the highest token among writes accepted
        // before each invocation is the witness.
        let mut by_accept: Vec<&AcceptedWrite> = writes.iter().collect();
        by_accept.sort_by_key(|w| w.accepted);
        let mut next = 0;
        let mut best: Option<&AcceptedWrite> = None;
        for w in &writes {
            while next < by_accept.len() && by_accept[next].accepted < w.invoked {
                let cand = by_accept[next];
                if best.is_none_or(|b| cand.token > b.token) {
                    best = Some(cand);
                }
                next += 1;
            }
            if let Some(b) = best.filter(|b| w.token < b.token) {
                out.push(Violation {
                    kind: ViolationKind::StaleWriteAccepted,
                    summary: format!("{resource} accepted a write for {lock} with token {} after it had accepted token {}", w.token, b.token),
                    events: vec![at(b.invoked), at(b.accepted), at(w.invoked), at(w.accepted)],
                });
            }
        }
    }
}

struct Grant<'a> {
    invoked: usize,
    ok: usize,
    session: &'a SessionRef,
    token: FencingToken,
}

fn ok_grants<'a>(history: &'a History, ops: &HashMap<OpId, Op>) -> Vec<(&'a LockKey, Grant<'a>)> {
    let mut grants = Vec::new();
    for (i, e) in history.events.iter().enumerate() {
        if let EventKind::GrantOk { op, lock, session, token, .. } = &e.kind {
            if let Some(o) = ops.get(op).filter(|o| o.outcome == Outcome::Ok(i)) {
                grants.push((lock, Grant { invoked: o.invoked, ok: i, session, token: *token }));
            }
        }
    }
    grants
}

fn tokens_grow(history: &History, ops: &HashMap<OpId, Op>, at: &dyn Fn(usize) -> EventRef, out: &mut Vec<Violation>) {
    // Unknown grants are left out: one may or may not exist, and whichever token it
    // carried, the definite grants alone must already grow.
    let mut by_lock: BTreeMap<&LockKey, Vec<Grant>> = BTreeMap::new();
    for (lock, g) in ok_grants(history, ops) {
        by_lock.entry(lock).or_default().push(g);
    }
    for (lock, grants) in by_lock {
        // `grants` is in order of acknowledgement; check each against every grant
        // acknowledged before it was invoked. Drills hold a few thousand grants per
        // lock, so quadratic is fine and keeps the idempotent-retry rule plain.
        for later in &grants {
            let witness = grants
                .iter()
                .filter(|earlier| earlier.ok < later.invoked)
                .filter(|earlier| later.token <= earlier.token)
                .filter(|earlier| !(earlier.token == later.token && earlier.session == later.session))
                .max_by_key(|earlier| earlier.token);
            if let Some(earlier) = witness {
                out.push(Violation {
                    kind: ViolationKind::TokenDidNotGrow,
                    summary: format!(
                        "{lock} was granted token {} to {} after token {} had been granted to {}",
                        later.token, later.session, earlier.token, earlier.session
                    ),
                    events: vec![at(earlier.ok), at(later.invoked), at(later.ok)],
                });
            }
        }
    }
}

fn grants_after_expiry(history: &History, ops: &HashMap<OpId, Op>, at: &dyn Fn(usize) -> EventRef, out: &mut Vec<Violation>) {
    let mut expired: HashMap<&SessionRef, usize> = HashMap::new();
    for (i, e) in history.events.iter().enumerate() {
        if let EventKind::SessionExpired { session, .. } = &e.kind {
            expired.entry(session).or_insert(i);
        }
    }
    let grants = ok_grants(history, ops);
    for (lock, g) in &grants {
        let Some(&exp) = expired.get(g.session) else { continue };
        if g.invoked < exp {
            continue; // The grant may have been made before the expiry.
        }
        // The same grant answered again to a retry is not a new grant.
        let answered_before = grants.iter().any(|(l, h)| l == lock && h.session == g.session && h.token == g.token && h.ok < exp);
        if answered_before {
            continue;
        }
        out.push(Violation {
            kind: ViolationKind::GrantAfterExpiry,
            summary: format!("{lock} was granted (token {}) to session {} after it was seen expired", g.token, g.session),
            events: vec![at(exp), at(g.invoked), at(g.ok)],
        });
    }
}

fn grants_lost(history: &History, at: &dyn Fn(usize) -> EventRef, out: &mut Vec<Violation>) {
    let ends = Ends::new(history);
    // Acknowledged grants per lock, with the time they were acknowledged. An unknown
    // grant is not acknowledged: it is never expected anywhere. A grant whose hold may
    // have ended for good before some read (released, or its end watched) leaves the
    // list then, so a long drill's reads look at the live holds only (a 30-minute
    // drill has some 25,000 reads of 50,000 grants).
    let mut grants: HashMap<&LockKey, Vec<(usize, &SessionRef, FencingToken, u64)>> = HashMap::new();
    for (i, e) in history.events.iter().enumerate() {
        match &e.kind {
            EventKind::GrantOk { lock, session, token, .. } => grants.entry(lock).or_default().push((i, session, *token, e.t_ms)),
            EventKind::HolderObserved { lock, since_ms, epoch, holders } => {
                let Some(of_lock) = grants.get_mut(lock) else { continue };
                of_lock.retain(|&(_, session, token, _)| !ends.ended_for_good(i, lock, session, token));
                for &(g, session, token, ok_ms) in of_lock.iter() {
                    if token.epoch() != *epoch || ok_ms >= *since_ms || holders.contains(&token) {
                        continue;
                    }
                    if ends.may_have_ended(i, e.t_ms, lock, session, token) {
                        continue;
                    }
                    out.push(Violation {
                        kind: ViolationKind::AcknowledgedGrantLost,
                        summary: format!("{lock}: the grant of token {token} to {session} is missing from a read of its holders at {epoch}"),
                        events: vec![at(g), at(i)],
                    });
                }
            }
            _ => {}
        }
    }
}

/// What says a hold may have ended, indexed once from the whole history.
struct Ends<'a> {
    /// The first line of a release sent for each hold (lock, session, token).
    released: HashMap<(&'a LockKey, &'a SessionRef, FencingToken), usize>,
    /// Holds whose end a watch reported (anywhere in the history).
    watched: HashSet<(&'a LockKey, FencingToken)>,
    /// The earliest time each session was seen expired.
    expired: HashMap<&'a SessionRef, u64>,
}

impl<'a> Ends<'a> {
    fn new(history: &'a History) -> Ends<'a> {
        let mut ends = Ends { released: HashMap::new(), watched: HashSet::new(), expired: HashMap::new() };
        for (j, e) in history.events.iter().enumerate() {
            match &e.kind {
                EventKind::ReleaseInvoked { lock, session, token, .. } => {
                    ends.released.entry((lock, session, *token)).or_insert(j);
                }
                EventKind::HoldEnded { lock, token, .. } => {
                    ends.watched.insert((lock, *token));
                }
                EventKind::SessionExpired { session, at_ms } => {
                    let first = ends.expired.entry(session).or_insert(*at_ms);
                    *first = (*first).min(*at_ms);
                }
                _ => {}
            }
        }
        ends
    }

    /// Whether some line says the hold may have ended before the read on line `read`
    /// answered (at `read_ms`):
    /// - a release sent before the read answered may have taken effect first, whatever
    ///   its answer (even an unknown one);
    /// - a watch only reports the end of a hold the cell had; whenever it arrived, the
    ///   end may have come before the read;
    /// - the session was seen expired by then.
    fn may_have_ended(&self, read: usize, read_ms: u64, lock: &LockKey, session: &SessionRef, token: FencingToken) -> bool {
        self.ended_for_good(read, lock, session, token) || self.expired.get(session).is_some_and(|&at| at <= read_ms)
    }

    /// The first two of those: true for this read, and so for every later one.
    fn ended_for_good(&self, read: usize, lock: &LockKey, session: &SessionRef, token: FencingToken) -> bool {
        self.released.get(&(lock, session, token)).is_some_and(|&j| j < read) || self.watched.contains(&(lock, token))
    }
}

fn two_cells_serving(history: &History, at: &dyn Fn(usize) -> EventRef, out: &mut Vec<Violation>) {
    let mut groups: BTreeMap<_, Vec<usize>> = BTreeMap::new();
    for (i, e) in history.events.iter().enumerate() {
        if let EventKind::CellServing { ns, shard, epoch, .. } = &e.kind {
            groups.entry((ns, shard, *epoch)).or_default().push(i);
        }
    }
    let interval = |i: usize| match &history.events[i].kind {
        EventKind::CellServing { cell, from_ms, until_ms, .. } => (cell, *from_ms, until_ms.unwrap_or(u64::MAX)),
        _ => unreachable!("grouped only CellServing lines"),
    };
    for ((ns, shard, epoch), lines) in groups {
        for (k, &a) in lines.iter().enumerate() {
            for &b in &lines[k + 1..] {
                let (ca, fa, ua) = interval(a);
                let (cb, fb, ub) = interval(b);
                if ca != cb && fa < ub && fb < ua {
                    out.push(Violation {
                        kind: ViolationKind::TwoCellsServing,
                        summary: format!("{ns}/{shard} was served at {epoch} by both {ca} and {cb} from {} ms to {} ms", fa.max(fb), ua.min(ub)),
                        events: vec![at(a), at(b)],
                    });
                }
            }
        }
    }
}

fn grants_after_ownership(history: &History, ops: &HashMap<OpId, Op>, at: &dyn Fn(usize) -> EventRef, out: &mut Vec<Violation>) {
    // For every (ns, shard, cell, epoch) the watch showed: the first line that showed
    // the shard at a later epoch (`None`: never, as far as the history goes).
    // The registry's own record of a transfer (the simulation) counts as the watch's.
    //
    // The watch showing the shard at a later epoch **at the same cell** does not end
    // that cell's ownership of the earlier one: the cell goes from one epoch to the
    // next itself, sealing the first (its holders are told `MOVED`) before it grants
    // at the second, in one lock table, and every token of the first is below every
    // token of the second (check 2). A registry recovered from a survivor or a
    // snapshot raises every epoch without a seal (docs/registry.md), and each owner
    // serves its old epoch until its next renewal tells it: by design, not a
    // violation. The registry's own record of a transfer (the simulation, where no
    // registry is recovered) ends it either way.
    let mut ended: BTreeMap<(&NamespaceName, &ShardName, &CellId, Epoch), Option<usize>> = BTreeMap::new();
    for (i, e) in history.events.iter().enumerate() {
        let (ns, shard, cell, epoch, ends_its_own) = match &e.kind {
            EventKind::OwnerObserved { ns, shard, cell, epoch, .. } => (ns, shard, cell.as_ref(), *epoch, false),
            EventKind::ShardTransferred { ns, shard, cell, epoch } => (ns, shard, Some(cell), *epoch, true),
            _ => continue,
        };
        for ((n, s, c, ep), end) in ended.iter_mut() {
            if *n == ns && *s == shard && *ep < epoch && end.is_none() && (ends_its_own || cell != Some(*c)) {
                *end = Some(i);
            }
        }
        if let Some(c) = cell {
            ended.entry((ns, shard, c, epoch)).or_insert(None);
        }
    }
    // The last line that ended an ownership of `ns` at `epoch` (by `cell`, or by any
    // cell), if every such ownership the history knows had ended before `line`.
    let all_ended_before = |ns: &NamespaceName, cell: Option<&CellId>, epoch: Epoch, line: usize| -> Option<usize> {
        let ends: Vec<Option<usize>> =
            ended.iter().filter(|((n, _, c, ep), _)| *n == ns && cell.is_none_or(|cell| *c == cell) && *ep == epoch).map(|(_, end)| *end).collect();
        if ends.is_empty() || !ends.iter().all(|end| end.is_some_and(|e| e < line)) {
            return None;
        }
        ends.into_iter().flatten().max()
    };
    // The cells' own moments of granting (the simulation): the first of each token.
    let first = first_grants(history);
    for (g, e) in history.events.iter().enumerate() {
        let EventKind::CellGranted { lock, token } = &e.kind else { continue };
        if first.get(&(lock, *token)) != Some(&g) {
            continue;
        }
        let epoch = token.epoch();
        // Whichever cell granted owned one of the namespace's shards at this epoch
        // (one owner per shard and epoch): flagged only if every such shard had moved
        // on before the grant.
        let Some(last_end) = all_ended_before(&lock.ns, None, epoch, g) else { continue };
        out.push(Violation {
            kind: ViolationKind::GrantAfterOwnershipEnded,
            summary: format!("a cell granted {lock} token {token} at {epoch} after the registry had moved its shard on"),
            events: vec![at(last_end), at(g)],
        });
    }
    for (g, e) in history.events.iter().enumerate() {
        let EventKind::GrantOk { op, lock, token, cell, .. } = &e.kind else { continue };
        let Some(invoked) = ops.get(op).map(|o| o.invoked) else { continue };
        // The shards of the namespace this cell owned at this epoch: the grant was in
        // one of them. Flagged only if every one had ended before the Acquire was sent.
        let epoch = token.epoch();
        let Some(last_end) = all_ended_before(&lock.ns, Some(cell), epoch, invoked) else { continue };
        out.push(Violation {
            kind: ViolationKind::GrantAfterOwnershipEnded,
            summary: format!("{cell} granted {lock} token {token} at {epoch} to an Acquire sent after the registry had moved its shard on"),
            events: vec![at(last_end), at(invoked), at(g)],
        });
    }
}

/// Check 7: the cells' grants against the ends of the holds before them.
fn two_holders(history: &History, at: &dyn Fn(usize) -> EventRef, out: &mut Vec<Violation>) {
    // Per lock and epoch, the stamped holds that have not ended: token, line.
    let mut live: HashMap<(&LockKey, Epoch), Vec<(FencingToken, usize)>> = HashMap::new();
    // Tokens already granted or ended: a repeated answer (an idempotent retry) or a
    // grant answered after its hold already ended starts no hold.
    let mut seen: HashSet<(&LockKey, FencingToken)> = HashSet::new();
    for (i, e) in history.events.iter().enumerate() {
        match &e.kind {
            EventKind::CellHoldEnded { lock, token, .. } => {
                seen.insert((lock, *token));
                if let Some(holds) = live.get_mut(&(lock, token.epoch())) {
                    holds.retain(|(t, _)| t != token);
                }
            }
            EventKind::CellGranted { lock, token } if seen.insert((lock, *token)) => {
                let holds = live.entry((lock, token.epoch())).or_default();
                if let Some(&(other, g)) = holds.first() {
                    out.push(Violation {
                        kind: ViolationKind::TwoHolders,
                        summary: format!("a cell granted {lock} token {token} while token {other}, granted before it at the same epoch, still held it"),
                        events: vec![at(g), at(i)],
                    });
                }
                holds.push((*token, i));
            }
            _ => {}
        }
    }
}

/// The first line on which a cell answered each token's grant (`CellGranted`; a retry
/// answered again is the same grant).
fn first_grants(history: &History) -> HashMap<(&LockKey, FencingToken), usize> {
    let mut first = HashMap::new();
    for (g, e) in history.events.iter().enumerate() {
        if let EventKind::CellGranted { lock, token } = &e.kind {
            first.entry((lock, *token)).or_insert(g);
        }
    }
    first
}

/// The first line of each hold's end the replicas stamped, in line order.
fn first_ends(history: &History) -> Vec<(usize, &LockKey, FencingToken, SessionId, EndReason)> {
    let mut seen = HashSet::new();
    let mut ends = Vec::new();
    for (i, e) in history.events.iter().enumerate() {
        if let EventKind::CellHoldEnded { lock, token, session, reason } = &e.kind {
            if seen.insert((lock, *token)) {
                ends.push((i, lock, *token, *session, *reason));
            }
        }
    }
    ends
}

/// Check 8: every hold the cell ended as released was asked to end by its holder.
fn releases_asked(history: &History, at: &dyn Fn(usize) -> EventRef, out: &mut Vec<Violation>) {
    // The earliest line that asked for each token's release, and for each session's close.
    let mut released: HashMap<(&LockKey, FencingToken), usize> = HashMap::new();
    let mut closed: HashMap<SessionId, usize> = HashMap::new();
    for (i, e) in history.events.iter().enumerate() {
        match &e.kind {
            EventKind::ReleaseInvoked { lock, token, .. } => {
                released.entry((lock, *token)).or_insert(i);
            }
            EventKind::SessionCloseInvoked { session } => {
                closed.entry(session.id).or_insert(i);
            }
            _ => {}
        }
    }
    for (i, lock, token, session, reason) in first_ends(history) {
        if reason != EndReason::Released {
            continue;
        }
        let before = |asked: Option<&usize>| asked.is_some_and(|&a| a < i);
        if !before(released.get(&(lock, token))) && !before(closed.get(&session)) {
            out.push(Violation {
                kind: ViolationKind::ReleaseNotAsked,
                summary: format!("the cell ended {lock} token {token} (session {session}) as released, but no release of that token nor close of its session was sent before"),
                events: vec![at(i)],
            });
        }
    }
}

/// Check 9: no grant of a lock within the lock-delay after a hold of it ended any way
/// but a release (or a move, which starts a new epoch).
fn lock_delay_kept(history: &History, at: &dyn Fn(usize) -> EventRef, out: &mut Vec<Violation>) {
    let mut delays: HashMap<&NamespaceName, Vec<(usize, u64)>> = HashMap::new();
    for (i, e) in history.events.iter().enumerate() {
        if let EventKind::LockDelaySet { ns, ms } = &e.kind {
            delays.entry(ns).or_default().push((i, *ms));
        }
    }
    // The namespace's lock-delay as last set before `line` (none set: no delay known).
    let delay_at = |ns: &NamespaceName, line: usize| delays.get(ns).and_then(|d| d.iter().rev().find(|(i, _)| *i < line)).map_or(0, |(_, ms)| *ms);
    let first_grant = first_grants(history);
    for (i, lock, ended, _, reason) in first_ends(history) {
        if !reason.triggers_lock_delay() || reason == EndReason::Moved {
            continue;
        }
        let delay = delay_at(&lock.ns, i);
        // The leader measures the delay on its own clock, which may run fast by the
        // stated bound on clock rates (the simulation drifts every host's clock up to it).
        let allowed = holdfast_core::clock_rate_allowance(std::time::Duration::from_millis(delay)).as_millis() as u64;
        let until = history.events[i].t_ms.saturating_add(delay - allowed);
        let early = first_grant
            .iter()
            .filter(|((l, token), &g)| *l == lock && token.epoch() == ended.epoch() && *token > ended && g > i && history.events[g].t_ms < until);
        if let Some((&(_, token), &g)) = early.min_by_key(|(_, &g)| g) {
            out.push(Violation {
                kind: ViolationKind::GrantDuringLockDelay,
                summary: format!(
                    "a cell granted {lock} token {token} {} ms after token {ended}'s hold ended ({reason}), within the lock-delay of {delay} ms",
                    history.events[g].t_ms - history.events[i].t_ms
                ),
                events: vec![at(i), at(g)],
            });
        }
    }
}

/// Check 10: no grant applied to a session after its end was applied.
fn grants_to_ended_sessions(history: &History, at: &dyn Fn(usize) -> EventRef, out: &mut Vec<Violation>) {
    let mut ended: HashMap<SessionId, usize> = HashMap::new();
    let mut began: HashSet<(&LockKey, FencingToken)> = HashSet::new();
    for (i, e) in history.events.iter().enumerate() {
        match &e.kind {
            EventKind::CellSessionEnded { session } => {
                ended.entry(*session).or_insert(i);
            }
            EventKind::CellHoldBegan { lock, token, session, .. } if began.insert((lock, *token)) => {
                if let Some(&end) = ended.get(session) {
                    out.push(Violation {
                        kind: ViolationKind::GrantToEndedSession,
                        summary: format!("a cell granted {lock} token {token} to session {session} after that session had ended"),
                        events: vec![at(end), at(i)],
                    });
                }
            }
            _ => {}
        }
    }
}
