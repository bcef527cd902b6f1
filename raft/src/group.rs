//! [`Group`]: what a server running on this substrate needs to serve clients from its
//! state machine — prove it leads ([`Leader`]), propose a command with a bounded wait,
//! read linearizably, check the leader lease — with every Raft failure turned into the
//! gRPC status clients expect (`NOT_LEADER` with the leader hint, or `UNAVAILABLE`).
//!
//! Encoding commands and decoding what `apply` answered stay with the application:
//! [`Group::propose`] takes and returns the opaque payload bytes.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use holdfast_core::ErrorCode;
use holdfast_rpc::CancellationToken;
use openraft::async_runtime::WatchReceiver;
use tonic::Status;
use tracing::{warn, Instrument};

use crate::error::WriteError;
use crate::node::current_metrics;
use crate::sm_store::{ReplicatedState, StateHandle, StateMachineStore};
use crate::snapshot_file::{GroupKind, Header, MemberAddrs};
use crate::types::{ForwardToLeader, Raft, ReadPolicy, Request};
use holdfast_rpc::status::{not_leader, status};

/// How long a linearizable read may wait for the leader to confirm itself.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a proposal may wait for its commit before the caller hears `UNAVAILABLE`.
pub const PROPOSE_TIMEOUT: Duration = Duration::from_secs(5);
/// How often [`Group::await_leadership`] looks again.
const LEADERSHIP_POLL: Duration = Duration::from_millis(50);

/// Proof that this node was the leader when it was checked: the only ways to get one
/// are [`Group::assume_leader`] and the checks built on it; a non-leader answers
/// `NOT_LEADER` with a hint instead.
#[derive(Debug, Clone, Copy)]
pub struct Leader(());

/// One node's handle on its Raft group and the applied state `S`.
pub struct Group<S: ReplicatedState> {
    raft: Raft<S>,
    state: StateHandle<S>,
    node_id: u64,
    /// How messages name the group: "this cell", "the registry".
    name: &'static str,
}

impl<S: ReplicatedState> fmt::Debug for Group<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Group").field("node_id", &self.node_id).field("name", &self.name).finish_non_exhaustive()
    }
}

impl<S: ReplicatedState> Group<S> {
    /// `name` is how status messages name the group ("this cell", "the registry").
    pub fn new(raft: Raft<S>, state: StateHandle<S>, node_id: u64, name: &'static str) -> Self {
        Group { raft, state, node_id, name }
    }

    pub fn raft(&self) -> &Raft<S> {
        &self.raft
    }

    /// Sets this node's Raft health gauges (`holdfast_raft_*{group, node}`): whether it
    /// knows a leader, leads, its term, commit and applied indexes. Servers call it
    /// every second; `group` names the group in the labels (a cell's name, "registry").
    pub fn record_health(&self, group: &str) {
        use holdfast_core::metric_names as m;
        let rm = current_metrics(&self.raft);
        let labels = [("group", group.to_owned()), ("node", self.node_id.to_string())];
        let leads = rm.current_leader == Some(self.node_id);
        metrics::gauge!(m::RAFT_HAS_LEADER, &labels).set(f64::from(u8::from(rm.current_leader.is_some())));
        metrics::gauge!(m::RAFT_IS_LEADER, &labels).set(f64::from(u8::from(leads)));
        metrics::gauge!(m::RAFT_TERM, &labels).set(rm.current_term as f64);
        metrics::gauge!(m::RAFT_COMMIT_INDEX, &labels).set(rm.local_committed.as_ref().map_or(0, |l| l.index) as f64);
        metrics::gauge!(m::RAFT_APPLIED_INDEX, &labels).set(rm.last_applied.as_ref().map_or(0, |l| l.index) as f64);
    }

    /// The applied state, as of now on this node (not linearizable: see [`Group::read`]).
    pub fn state(&self) -> &StateHandle<S> {
        &self.state
    }

    pub fn node_id(&self) -> u64 {
        self.node_id
    }

    /// The current Raft term as this node knows it.
    pub fn term(&self) -> u64 {
        current_metrics(&self.raft).current_term
    }

    /// `Ok(Leader)` if this node leads its group, else `NOT_LEADER` carrying the
    /// leader's client address (when known) in `holdfast-leader` metadata.
    pub fn assume_leader(&self) -> Result<Leader, Status> {
        match self.raft.as_leader() {
            Ok(_) => Ok(Leader(())),
            Err(fwd) => Err(self.not_leader(&fwd)),
        }
    }

    /// A [`Leader`] if this node still leads in `term` (leader duties stop when the term
    /// they started in ends, even if this node wins the next one).
    pub fn leader_in_term(&self, term: u64) -> Option<Leader> {
        let leader = self.assume_leader().ok()?;
        (self.term() == term).then_some(leader)
    }

    /// Returns once this node no longer leads in `term` — it heard a higher term, or
    /// its Raft stopped — as [`Group::leader_in_term`] would say. A call that
    /// waits on this leader's word (a queued acquire) ends then: a deposed node hears
    /// the log late, if at all.
    pub async fn deposed(&self, term: u64) {
        let mut metrics = self.raft.metrics();
        while self.leader_in_term(term).is_some() {
            if metrics.changed().await.is_err() {
                return;
            }
        }
    }

    /// Waits until this node leads and has applied everything earlier leaders committed
    /// (a read index in its own term), then returns that term — the moment leader
    /// duties may build their view of the state. `None` once `shutdown` fires.
    pub async fn await_leadership(&self, shutdown: &CancellationToken) -> Option<u64> {
        loop {
            if shutdown.is_cancelled() {
                return None;
            }
            if self.raft.as_leader().is_ok() {
                let term = self.term();
                match self.raft.ensure_linearizable(ReadPolicy::ReadIndex).await {
                    Ok(_) => return Some(term),
                    Err(e) => warn!(term, error = %e, "could not confirm leadership; not starting leader duties"),
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(LEADERSHIP_POLL) => {}
                _ = shutdown.cancelled() => {}
            }
        }
    }

    /// Commits `payload` and returns what `apply` answered for it. A Raft failure is a
    /// `Status`: `NOT_LEADER`, or `UNAVAILABLE` when the outcome is unknown — the entry
    /// may still commit, so the caller retries with the same request id and gets the
    /// real outcome.
    pub async fn propose(&self, leader: Leader, payload: Vec<u8>) -> Result<Vec<u8>, Status> {
        self.propose_timed(leader, payload).instrument(tracing::info_span!("raft.propose", group = self.name)).await
    }

    async fn propose_timed(&self, _leader: Leader, payload: Vec<u8>) -> Result<Vec<u8>, Status> {
        let started = std::time::Instant::now();
        let write = self.raft.client_write(Request::new(payload));
        // A leader that lost its quorum would hold the call forever.
        let r = tokio::time::timeout(PROPOSE_TIMEOUT, write)
            .await
            .map_err(|_| {
                status(
                    ErrorCode::Unavailable,
                    format!("not committed within {} ms (lost quorum?); the outcome is unknown, retry with the same request_id", PROPOSE_TIMEOUT.as_millis()),
                )
            })?
            .map_err(|e| WriteError::from(e).to_status())?;
        let answered = std::time::Instant::now();
        metrics::histogram!(holdfast_core::metric_names::RAFT_PROPOSE).record(answered.duration_since(started).as_secs_f64());
        if let Some(marks) = self.state.stages().take(r.log_id.index) {
            crate::stages::record(started, &marks, answered);
        }
        Ok(r.data.payload)
    }

    /// Runs `f` on a state that includes every write committed before this call
    /// (read index: the leader confirms it still leads with a quorum round).
    pub async fn read<T>(&self, f: impl FnOnce(&S) -> T) -> Result<T, Status> {
        self.assume_leader()?;
        let read = tokio::time::timeout(READ_TIMEOUT, self.raft.ensure_linearizable(ReadPolicy::ReadIndex))
            .await
            .map_err(|_| status(ErrorCode::Unavailable, "the leader could not confirm a quorum in time"))?;
        read.map_err(|e| match self.raft.as_leader() {
            Err(fwd) => self.not_leader(&fwd),
            Ok(_) => status(ErrorCode::Unavailable, format!("linearizable read failed: {e}")),
        })?;
        Ok(self.state.read(f))
    }

    /// The whole applied state for a snapshot file ([`crate::snapshot_file`]): read
    /// after a read index, so every write committed before this call is in it, with
    /// the id of the last entry it includes and the members as of that entry (read
    /// together on the state machine's task). Only the leader answers; `group` names
    /// the group in the header, `taken_by` who asked.
    pub async fn snapshot_file(&self, kind: GroupKind, group: &str, taken_by: &str) -> Result<(Header, Arc<Vec<u8>>), Status> {
        self.read(|_| ()).await?;
        let term = self.term();
        let (last, membership, data) = self
            .raft
            .with_state_machine(|sm: &mut StateMachineStore<S>| Box::pin(std::future::ready(sm.capture())))
            .await
            .map_err(|e| status(ErrorCode::Unavailable, format!("the state machine did not answer: {e}")))?;
        let last = last.ok_or_else(|| status(ErrorCode::Unavailable, format!("{} has applied nothing yet", self.name)))?;
        let members = membership.membership().nodes().map(|(id, n)| (*id, MemberAddrs { raft: n.raft_addr.clone(), client: n.client_addr.clone() })).collect();
        let header = Header {
            kind,
            group: group.to_owned(),
            leader: self.node_id,
            term,
            last_index: last.index,
            last_term: last.leader_id.term,
            last_leader: last.leader_id.node_id,
            members,
            taken_at_unix_ms: wall_clock_ms(),
            taken_by: taken_by.to_owned(),
            holdfast_version: env!("CARGO_PKG_VERSION").to_owned(),
            state_bytes: data.len() as u64,
        };
        Ok((header, Arc::new(data)))
    }

    /// Succeeds only while this leader holds openraft's leader lease (a quorum
    /// acknowledged it within the lease). No network round.
    pub async fn lease_check(&self) -> Result<Leader, Status> {
        let leader = self.assume_leader()?;
        self.raft.ensure_linearizable(ReadPolicy::LeaseRead).await.map_err(|e| match self.raft.as_leader() {
            Err(fwd) => self.not_leader(&fwd),
            Ok(_) => status(ErrorCode::NotLeader, format!("leader lease not held: {e}")),
        })?;
        Ok(leader)
    }

    fn not_leader(&self, fwd: &ForwardToLeader) -> Status {
        let msg = match fwd.leader_id {
            Some(id) => format!("not the leader; node {id} leads {}", self.name),
            None => format!("not the leader; no leader of {} is known yet", self.name),
        };
        let hint = fwd.leader_node.as_ref().map(|n| n.client_addr.as_str()).filter(|a| !a.is_empty());
        not_leader(msg, hint)
    }
}

/// The leader's wall clock, stamped on entries for display and audit only: `apply`
/// never decides anything by it.
pub fn wall_clock_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}
