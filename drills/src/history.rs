//! The history of a drill: one JSON object per line, in the order the recorder saw
//! them.
//!
//! **Line order is real-time order.** The recorder appends an invocation
//! (`GrantInvoked`, `ReleaseInvoked`, `WriteAttempt`) *before* it sends the request and
//! the completion *after* the answer arrives, through one lock. So "completion of A is
//! on an earlier line than the invocation of B" means A finished before B started; the
//! checker relies on nothing else for ordering. `t_ms` (monotonic, since the drill
//! started) is for durations and for the few fields measured in time (`since_ms`,
//! `at_ms`, serving intervals); `wall_ms` is for humans only.
//!
//! An operation whose answer never came (timeout, connection lost, the drill ended)
//! is recorded as `*Unknown`, or left without a completion: both mean "may or may not
//! have taken effect".

use holdfast_core::{CellId, EndReason, Epoch, FencingToken, LockName, NamespaceName, RegionId, SessionId, ShardName};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Pairs an invocation with its completion. Unique within a history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct OpId(pub u64);

/// A lock: its namespace and its name (the name decides the shard).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LockKey {
    pub ns: NamespaceName,
    pub name: LockName,
}

/// A session: session ids are unique within one cell only.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SessionRef {
    pub cell: CellId,
    pub id: SessionId,
}

/// The kinds of fault the drill harness injects (issue 8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    KillCellLeader,
    KillRegion,
    /// Cut a region off (drops, not resets).
    PartitionRegion,
    /// SIGSTOP a lock holder past its TTL.
    PauseHolder,
    /// SIGSTOP a cell leader past its election timeout.
    PauseLeader,
    /// Step a node's wall clock (libfaketime).
    ClockStep,
    /// Undo an earlier fault on the same target.
    Heal,
    /// SIGKILL one node (any, leader or not) and start it again on its data.
    KillNode,
    /// Replace a voter of a running cell by a new node (a membership change).
    ReplaceNode,
    /// A node whose messages are lost while it still receives (the simulation).
    PartitionOneway,
    /// Every message to and from a node held, then delivered at once at the heal:
    /// what its peers see of a process stopped by a pause (the simulation).
    HoldNode,
    /// A node's links slowed (the simulation).
    SlowNode,
    /// A node's disk slowed: each sync of its Raft log takes tens or hundreds of
    /// milliseconds (the simulation).
    SlowDisk,
    /// Every node of a cell cut off from the registry's voters, while the cell keeps
    /// its quorum and its clients (the simulation with moves).
    CutFromRegistry,
    /// [`FaultKind::CutFromRegistry`], and the gateway cut off from the registry too:
    /// its route to the cell goes stale while the registry may move the cell's shards
    /// away (the simulation with moves).
    StaleRoute,
    /// Every node of a Raft group (a cell, or the registry) loses power at once: their
    /// disks slow first (so writes are in flight), then they crash, each losing the log
    /// entries it wrote and had not synced, and start again on what their disks kept
    /// (the simulation).
    PowerCut,
    /// The registry loses its quorum: a majority of its voters stopped (SIGSTOP) while
    /// every cell and gateway runs on.
    RegistryQuorumLost,
    /// A cell's majority lost for good: its nodes killed and their data directories
    /// deleted (a drill on real processes; the survivor is recovered).
    CellMajorityLost,
    /// A whole region cut off from the rest: its cell's nodes from the registry's
    /// voters and from the gateways of other regions, a gateway in it from the
    /// registry too (the simulation with moves).
    RegionCut,
    /// A node's monotonic clock runs fast, by the parts per million its target names
    /// (`host +Nppm`), for the whole run (the simulation).
    ClockRate,
}

impl fmt::Display for LockKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.ns, self.name)
    }
}

impl fmt::Display for SessionRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.cell, self.id)
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = serde_json::to_value(self).ok().and_then(|v| v.as_str().map(str::to_owned));
        f.write_str(s.as_deref().unwrap_or("fault"))
    }
}

/// One line of a history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Milliseconds since the drill started, on the recorder's monotonic clock.
    /// Never decreases along a history.
    pub t_ms: u64,
    /// Unix milliseconds when recorded. For humans; the checker never reads it.
    pub wall_ms: u64,
    #[serde(flatten)]
    pub kind: EventKind,
}

/// What happened. Serialized with a `"type"` field in snake_case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    /// An Acquire was sent.
    GrantInvoked {
        op: OpId,
        lock: LockKey,
        session: SessionRef,
    },
    /// The Acquire answered with a grant.
    GrantOk {
        op: OpId,
        lock: LockKey,
        session: SessionRef,
        token: FencingToken,
        region: RegionId,
        cell: CellId,
    },
    /// The Acquire was refused (`code` is the stable error code): no grant.
    GrantFailed {
        op: OpId,
        code: String,
    },
    /// No answer: a grant may or may not exist.
    GrantUnknown {
        op: OpId,
    },
    /// A Watch said the session expired. `at_ms` is the earliest drill time at which
    /// the expiry may have taken effect (the recorder uses the session's last
    /// acknowledged renewal; never later than this event's `t_ms`).
    SessionExpired {
        session: SessionRef,
        at_ms: u64,
    },
    /// A Release was sent.
    ReleaseInvoked {
        op: OpId,
        lock: LockKey,
        session: SessionRef,
        token: FencingToken,
    },
    ReleaseOk {
        op: OpId,
    },
    ReleaseFailed {
        op: OpId,
        code: String,
    },
    ReleaseUnknown {
        op: OpId,
    },
    /// A Watch said a hold ended (moved, broken, max hold, ...).
    HoldEnded {
        lock: LockKey,
        token: FencingToken,
        reason: EndReason,
    },
    /// A linearizable read (Describe) of a lock's holders, sent at `since_ms`, answered
    /// by a cell serving the lock's shard at `epoch`.
    HolderObserved {
        lock: LockKey,
        since_ms: u64,
        epoch: Epoch,
        holders: Vec<FencingToken>,
    },
    /// A write was sent to the fenced resource.
    WriteAttempt {
        op: OpId,
        lock: LockKey,
        token: FencingToken,
        resource: String,
    },
    WriteAccepted {
        op: OpId,
    },
    /// The resource refused the write (a stale token): it did not take effect.
    WriteRejected {
        op: OpId,
    },
    /// No answer: the write may or may not have been applied.
    WriteUnknown {
        op: OpId,
    },
    /// The registry's watch: the shard's owner. `cell: None` means no cell owns it;
    /// `moving_to` is set while a transfer is in progress.
    OwnerObserved {
        ns: NamespaceName,
        shard: ShardName,
        cell: Option<CellId>,
        epoch: Epoch,
        moving_to: Option<CellId>,
    },
    /// A cell's own view that it served `(ns, shard)` at `epoch` from `from_ms` until
    /// `until_ms` (`None`: still serving when the drill ended).
    CellServing {
        cell: CellId,
        ns: NamespaceName,
        shard: ShardName,
        epoch: Epoch,
        from_ms: u64,
        until_ms: Option<u64>,
    },
    /// The simulation only: a cell answered an Acquire with a grant of `token`,
    /// recorded at that moment on the clock every simulated host shares (not when the
    /// worker heard it, which a held or slowed link can make seconds later).
    CellGranted {
        lock: LockKey,
        token: FencingToken,
    },
    /// The simulation only: a replica of a cell applied the end of the hold of `token`
    /// (held by `session`; ended for `reason`), recorded at that moment on the shared
    /// clock. Every replica applies it; the first line counts.
    CellHoldEnded {
        lock: LockKey,
        token: FencingToken,
        session: SessionId,
        reason: EndReason,
    },
    /// The simulation only: a replica of a cell applied the grant of `token` to
    /// `session` (whether or not any call was still waiting to hear it), on the shared
    /// clock. Every replica applies it; the first line counts.
    CellHoldBegan {
        lock: LockKey,
        token: FencingToken,
        session: SessionId,
        /// The cell's revision of the grant: the log's order, which the lines of
        /// several replicas need not show (0 in histories from before it was stamped).
        #[serde(default)]
        revision: u64,
    },
    /// The simulation only: a replica of a cell applied the queueing of `session`'s
    /// Acquire behind the lock's holders, on the shared clock, at the cell's `revision`,
    /// the shard then at `epoch` in that cell.
    CellWaiterQueued {
        lock: LockKey,
        epoch: Epoch,
        session: SessionId,
        revision: u64,
    },
    /// The simulation only: a replica applied the end of `session`'s wait without a
    /// grant (its wait ran out, its session ended, or the shard was sealed).
    CellWaiterLeft {
        lock: LockKey,
        epoch: Epoch,
        session: SessionId,
        revision: u64,
    },
    /// The simulation only: a replica of a cell applied the end of `session` (closed
    /// or expired), on the shared clock. The first line counts.
    CellSessionEnded {
        session: SessionId,
    },
    /// A worker asked its cell to close `session` (which releases its holds).
    SessionCloseInvoked {
        session: SessionRef,
    },
    /// The namespace's lock-delay as the run configured it: after a hold ends any way
    /// but a release, its lock is granted to no one for this long.
    LockDelaySet {
        ns: NamespaceName,
        ms: u64,
    },
    /// The simulation only: a cell's leader built its lease clock (a new leader, or a
    /// snapshot replaced its state), on the shared clock. Every wait timer restarts
    /// from here.
    CellTimersRestarted,
    /// The longest a waiter may stay queued, as the run configured its workload: the
    /// longer of the session TTL and the Acquire's wait, plus slack for the timeout
    /// to commit under the run's faults; counted from its queueing or the latest
    /// [`EventKind::CellTimersRestarted`], whichever is later.
    WaitsBounded {
        ms: u64,
    },
    /// The simulation only: the registry committed the shard's transfer to `cell` at
    /// `epoch`, recorded at that moment on the same shared clock.
    ShardTransferred {
        ns: NamespaceName,
        shard: ShardName,
        cell: CellId,
        epoch: Epoch,
    },
    FaultInjected {
        kind: FaultKind,
        target: String,
    },
    WaveStarted {
        wave: u32,
    },
    WaveEnded {
        wave: u32,
    },
}

/// A whole drill history, in line order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History {
    pub events: Vec<Event>,
}

/// A history file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("line {line}: {source}")]
    BadLine { line: usize, source: serde_json::Error },
    #[error("line {line}: t_ms {t_ms} is before the previous line's {previous}")]
    TimeWentBack { line: usize, t_ms: u64, previous: u64 },
}

impl History {
    pub fn new() -> History {
        History::default()
    }

    /// Appends an event. The caller keeps `t_ms` non-decreasing.
    pub fn push(&mut self, t_ms: u64, wall_ms: u64, kind: EventKind) {
        self.events.push(Event { t_ms, wall_ms, kind });
    }

    /// Reads JSON lines; blank lines are skipped. Line numbers in errors are 1-based.
    pub fn from_jsonl(text: &str) -> Result<History, HistoryError> {
        let mut events = Vec::new();
        let mut previous = 0;
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let event: Event = serde_json::from_str(line).map_err(|source| HistoryError::BadLine { line: i + 1, source })?;
            if event.t_ms < previous {
                return Err(HistoryError::TimeWentBack { line: i + 1, t_ms: event.t_ms, previous });
            }
            previous = event.t_ms;
            events.push(event);
        }
        Ok(History { events })
    }

    /// One JSON object per line, each ending with a newline.
    pub fn to_jsonl(&self) -> String {
        let mut out = String::new();
        for e in &self.events {
            // Serializing these plain data types cannot fail.
            out.push_str(&serde_json::to_string(e).expect("event serializes"));
            out.push('\n');
        }
        out
    }

    /// The time of the last event (the drill's length as recorded).
    pub fn end_ms(&self) -> u64 {
        self.events.last().map_or(0, |e| e.t_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock() -> LockKey {
        LockKey { ns: NamespaceName::new("payments").unwrap(), name: LockName::new("batch/7").unwrap() }
    }

    #[test]
    fn jsonl_round_trip() {
        let mut h = History::new();
        let session = SessionRef { cell: CellId::new("us-east-1").unwrap(), id: SessionId(3) };
        h.push(0, 1_700_000_000_000, EventKind::GrantInvoked { op: OpId(1), lock: lock(), session: session.clone() });
        h.push(
            4,
            1_700_000_000_004,
            EventKind::GrantOk {
                op: OpId(1),
                lock: lock(),
                session,
                token: FencingToken(1 << 40 | 9),
                region: RegionId::new("us-east").unwrap(),
                cell: CellId::new("us-east-1").unwrap(),
            },
        );
        h.push(5, 0, EventKind::FaultInjected { kind: FaultKind::PartitionRegion, target: "eu-west".into() });
        h.push(6, 0, EventKind::WriteUnknown { op: OpId(2) });
        let text = h.to_jsonl();
        assert!(text.lines().next().unwrap().contains(r#""type":"grant_invoked""#), "{text}");
        assert!(text.contains(r#""kind":"partition_region""#), "{text}");
        assert_eq!(History::from_jsonl(&text).unwrap(), h);
    }

    #[test]
    fn bad_lines_are_refused_with_their_number() {
        let err = History::from_jsonl("\n{\"t_ms\":1,\"wall_ms\":0,\"type\":\"wave_started\",\"wave\":0}\nnope\n").unwrap_err();
        assert!(matches!(err, HistoryError::BadLine { line: 3, .. }), "{err}");
        let back = "{\"t_ms\":5,\"wall_ms\":0,\"type\":\"wave_started\",\"wave\":0}\n{\"t_ms\":4,\"wall_ms\":0,\"type\":\"wave_ended\",\"wave\":0}";
        assert!(matches!(History::from_jsonl(back).unwrap_err(), HistoryError::TimeWentBack { line: 2, .. }));
        // An invalid name is refused by the core newtypes, not accepted unchecked.
        let bad = r#"{"t_ms":1,"wall_ms":0,"type":"owner_observed","ns":"Bad Name","shard":"default","cell":null,"epoch":1,"moving_to":null}"#;
        assert!(History::from_jsonl(bad).is_err());
    }
}
