//! Checks 11 and 12 of the [safety checker](super): the cell's lock queues, rebuilt
//! from the replicas' stamps in the log's order — grants go to the front of the queue,
//! and no waiter stays queued past the run's bound.

use super::{EventRef, Violation, ViolationKind};
use crate::history::{EventKind, FaultKind, History, LockKey};
use holdfast_core::{Epoch, FencingToken, SessionId};
use std::collections::{BTreeMap, HashMap};

/// Checks 11 and 12 on `history`.
pub(super) fn check(history: &History, at: &dyn Fn(usize) -> EventRef, out: &mut Vec<Violation>) {
    let queues = queue_logs(history);
    grants_in_queue_order(&queues, at, out);
    waiters_leave(history, &queues, at, out);
}

/// A change of a lock's holders or queue, as a replica applied it.
#[derive(Clone, Copy)]
enum QueueChange {
    Queued,
    Left,
    Began(FencingToken),
}

/// Per lock and epoch, each change of the queue once (every replica stamps it; the
/// first line stands for it), in the log's order: the cell's revision.
type QueueLogs<'h> = BTreeMap<(&'h LockKey, Epoch), BTreeMap<u64, (QueueChange, SessionId, usize)>>;

fn queue_logs(history: &History) -> QueueLogs<'_> {
    let mut logs: QueueLogs<'_> = BTreeMap::new();
    for (i, e) in history.events.iter().enumerate() {
        let (lock, epoch, revision, change, session) = match &e.kind {
            EventKind::CellWaiterQueued { lock, epoch, session, revision } => (lock, *epoch, *revision, QueueChange::Queued, session),
            EventKind::CellWaiterLeft { lock, epoch, session, revision } => (lock, *epoch, *revision, QueueChange::Left, session),
            // Revision 0: a line from before grants carried one, which says no order.
            EventKind::CellHoldBegan { lock, token, session, revision } if *revision > 0 => {
                (lock, token.epoch(), *revision, QueueChange::Began(*token), session)
            }
            _ => continue,
        };
        logs.entry((lock, epoch)).or_default().entry(revision).or_insert((change, *session, i));
    }
    logs
}

/// Check 11: the cell's grants of each lock go to the front of its queue.
fn grants_in_queue_order(logs: &QueueLogs<'_>, at: &dyn Fn(usize) -> EventRef, out: &mut Vec<Violation>) {
    for (&(lock, epoch), log) in logs {
        let mut queue: Vec<(SessionId, usize)> = Vec::new();
        for &(change, session, i) in log.values() {
            match change {
                QueueChange::Queued => queue.push((session, i)),
                QueueChange::Left => queue.retain(|(s, _)| *s != session),
                QueueChange::Began(token) => {
                    if let Some(&(first, q)) = queue.first().filter(|(s, _)| *s != session) {
                        out.push(Violation {
                            kind: ViolationKind::GrantOutOfQueueOrder,
                            summary: format!("a cell granted {lock} token {token} to session {session} while session {first}, queued before it at epoch {epoch}, still waited"),
                            events: vec![at(q), at(i)],
                        });
                    }
                    queue.retain(|(s, _)| *s != session);
                }
            }
        }
    }
}

/// Check 12: every waiter leaves its queue (granted, timed out, or its session ended)
/// within the run's bound of its queueing or of the latest rebuild of a leader's
/// timers, whichever is later.
fn waiters_leave(history: &History, logs: &QueueLogs<'_>, at: &dyn Fn(usize) -> EventRef, out: &mut Vec<Violation>) {
    let Some(bound) = history.events.iter().find_map(|e| match e.kind {
        EventKind::WaitsBounded { ms } => Some(ms),
        _ => None,
    }) else {
        return;
    };
    // A leader's timers restart at each rebuild. A cell cut off from the registry (or
    // with the registry's quorum lost) holds them by design while its ownership lease
    // is out (a timeout may grant the next waiter), so the heal of such a cut counts as
    // a restart too.
    let mut restarts = Vec::new();
    let mut faults: HashMap<&str, FaultKind> = HashMap::new();
    for e in &history.events {
        match &e.kind {
            EventKind::CellTimersRestarted => restarts.push(e.t_ms),
            EventKind::FaultInjected { kind: FaultKind::Heal, target } => {
                if matches!(
                    faults.remove(target.as_str()),
                    Some(FaultKind::CutFromRegistry | FaultKind::StaleRoute | FaultKind::RegistryQuorumLost | FaultKind::RegionCut)
                ) {
                    restarts.push(e.t_ms);
                }
            }
            EventKind::FaultInjected { kind, target } => {
                faults.insert(target, *kind);
            }
            _ => {}
        }
    }
    let end = history.events.last().map_or(0, |e| e.t_ms);
    for (&(lock, epoch), log) in logs {
        // Each waiter: the line that queued it, and the one that took it out (if any).
        let mut waiting: Vec<(SessionId, usize)> = Vec::new();
        let mut stays: Vec<(SessionId, usize, Option<usize>)> = Vec::new();
        for &(change, session, i) in log.values() {
            match change {
                QueueChange::Queued => waiting.push((session, i)),
                QueueChange::Left | QueueChange::Began(_) => {
                    if let Some(pos) = waiting.iter().position(|(s, _)| *s == session) {
                        let (_, q) = waiting.remove(pos);
                        stays.push((session, q, Some(i)));
                    }
                }
            }
        }
        stays.extend(waiting.into_iter().map(|(s, q)| (s, q, None)));
        for (session, q, left) in stays {
            let from = history.events[q].t_ms;
            let until = left.map_or(end, |l| history.events[l].t_ms);
            // The longest stretch of the stay with no rebuild of the timers in it.
            let mut points: Vec<u64> = restarts.iter().copied().filter(|&t| t > from && t < until).collect();
            points.insert(0, from);
            points.push(until);
            // Saturating: in a history where a cell reused revisions (a violation the
            // token checks report), a waiter's line can come after the line that took it out.
            let longest = points.windows(2).map(|w| w[1].saturating_sub(w[0])).max().unwrap_or(0);
            if longest > bound {
                let how = if left.is_some() { "before it left" } else { "and was still queued when the run ended" };
                out.push(Violation {
                    kind: ViolationKind::WaiterOutstayed,
                    summary: format!(
                        "session {session} waited for {lock} at epoch {epoch} for {longest} ms with no rebuild of a leader's timers (nor a registry cut healed) {how}; the bound is {bound} ms"
                    ),
                    events: std::iter::once(q).chain(left).map(at).collect(),
                });
            }
        }
    }
}
