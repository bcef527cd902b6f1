//! `Cell`: what every handler of a cell server shares — the Raft handle, the applied
//! state, the hooks — and the three ways a handler touches them: propose a command,
//! read linearizably, and check the leader lease.

use crate::machine::{CellMachine, Hooks};
use holdfast_cell_state::{Applied, CellError, CellState, Command, Entry, Outcome};
use holdfast_core::ErrorCode;
use holdfast_raft::{status, Node, Raft, ReadPolicy, StateHandle, WriteError};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tonic::Status;

/// How long a linearizable read may wait for the leader to confirm itself.
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a proposal may wait for its commit before the caller hears `UNAVAILABLE`.
const PROPOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// The shared core of a cell server.
#[derive(Debug)]
pub struct Cell {
    pub(crate) raft: Raft<CellMachine>,
    pub(crate) state: StateHandle<CellMachine>,
    pub(crate) hooks: Arc<Hooks>,
    pub(crate) node_id: u64,
}

/// Proof that this node was the leader when it was checked: the only way to get one
/// is [`Cell::assume_leader`], and a non-leader answers `NOT_LEADER` with a hint.
#[derive(Debug, Clone, Copy)]
pub struct Leader(());

impl Cell {
    /// `Ok(Leader)` if this node leads its cell, else `NOT_LEADER` carrying the
    /// leader's client address (when known) in `holdfast-leader` metadata.
    pub fn assume_leader(&self) -> Result<Leader, Status> {
        match self.raft.as_leader() {
            Ok(_) => Ok(Leader(())),
            Err(fwd) => Err(not_leader(fwd.leader_id, fwd.leader_node.as_ref())),
        }
    }

    /// Commits `cmd` and returns what the lock table answered. A Raft failure is a
    /// `Status`: `NOT_LEADER`, or `UNAVAILABLE` when the outcome is unknown (the caller
    /// retries with the same request id and gets the real outcome).
    pub async fn propose(&self, _leader: Leader, cmd: Command) -> Result<Result<Outcome, CellError>, Status> {
        let entry = Entry::new(wall_clock_ms(), cmd);
        let write = self.raft.client_write(holdfast_raft::Request::new(entry.encode()));
        // A leader that lost its quorum would hold the call forever; the client is told
        // the outcome is unknown (it may still commit) and retries with its request id.
        let r = tokio::time::timeout(PROPOSE_TIMEOUT, write)
            .await
            .map_err(|_| {
                status(
                    ErrorCode::Unavailable,
                    format!("not committed within {} ms (lost quorum?); the outcome is unknown, retry with the same request_id", PROPOSE_TIMEOUT.as_millis()),
                    None,
                )
            })?
            .map_err(|e| WriteError::from(e).to_status())?;
        let applied = Applied::decode(&r.data.payload)
            .map_err(|e| status(ErrorCode::Unavailable, format!("cannot decode the apply result: {e}"), None))?;
        Ok(applied.result)
    }

    /// Runs `f` on a state that includes every write committed before this call
    /// (read index: the leader confirms it still leads with a quorum round).
    pub async fn read<T>(&self, f: impl FnOnce(&CellState) -> T) -> Result<T, Status> {
        self.assume_leader()?;
        let read = tokio::time::timeout(READ_TIMEOUT, self.raft.ensure_linearizable(ReadPolicy::ReadIndex))
            .await
            .map_err(|_| status(ErrorCode::Unavailable, "the leader could not confirm a quorum in time".into(), None))?;
        read.map_err(|e| match self.raft.as_leader() {
            Err(fwd) => not_leader(fwd.leader_id, fwd.leader_node.as_ref()),
            Ok(_) => status(ErrorCode::Unavailable, format!("linearizable read failed: {e}"), None),
        })?;
        Ok(self.state.read(|m| f(m.state())))
    }

    /// Rule 1 of the session rules: succeeds only while this leader holds openraft's
    /// leader lease (a quorum acknowledged it within the lease). No network round.
    pub async fn lease_check(&self) -> Result<Leader, Status> {
        let leader = self.assume_leader()?;
        self.raft.ensure_linearizable(ReadPolicy::LeaseRead).await.map_err(|e| match self.raft.as_leader() {
            Err(fwd) => not_leader(fwd.leader_id, fwd.leader_node.as_ref()),
            Ok(_) => status(ErrorCode::NotLeader, format!("leader lease not held: {e}"), None),
        })?;
        Ok(leader)
    }
}

fn not_leader(leader_id: Option<u64>, leader: Option<&Node>) -> Status {
    let msg = match leader_id {
        Some(id) => format!("not the leader; node {id} leads this cell"),
        None => "not the leader; no leader is known yet".to_owned(),
    };
    status(ErrorCode::NotLeader, msg, leader.map(|n| n.client_addr.as_str()).filter(|a| !a.is_empty()))
}

/// The leader's wall clock, stamped on entries for display and audit only.
pub(crate) fn wall_clock_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// The one mapping of lock-table refusals to gRPC statuses.
pub fn cell_status(e: &CellError) -> Status {
    status(e.code(), e.to_string(), None)
}
