//! `Registry`: what every handler of a registry server shares — the Raft handle, the
//! applied state, the hooks — and the ways a handler touches them: propose a command,
//! read linearizably, and check the leader lease.

use crate::machine::{Hooks, RegistryMachine};
use holdfast_core::ErrorCode;
use holdfast_raft::{status, Node, Raft, ReadPolicy, StateHandle, WriteError};
use holdfast_registry_state::{Applied, Command, Entry, Outcome, RegistryError, RegistryState};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tonic::Status;

/// How long a linearizable read may wait for the leader to confirm itself.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The shared core of a registry server.
#[derive(Debug)]
pub struct Registry {
    pub(crate) raft: Raft<RegistryMachine>,
    pub(crate) state: StateHandle<RegistryMachine>,
    pub(crate) hooks: Arc<Hooks>,
    pub(crate) node_id: u64,
}

/// Proof that this node was the leader when it was checked: the only way to get one
/// is [`Registry::assume_leader`], and a non-leader answers `NOT_LEADER` with a hint.
#[derive(Debug, Clone, Copy)]
pub struct Leader(());

impl Registry {
    /// `Ok(Leader)` if this node leads the registry, else `NOT_LEADER` carrying the
    /// leader's client address (when known) in `holdfast-leader` metadata.
    pub fn assume_leader(&self) -> Result<Leader, Status> {
        match self.raft.as_leader() {
            Ok(_) => Ok(Leader(())),
            Err(fwd) => Err(not_leader(fwd.leader_id, fwd.leader_node.as_ref())),
        }
    }

    /// Commits `cmd` and returns what the registry answered. A Raft failure is a
    /// `Status`: `NOT_LEADER`, or `UNAVAILABLE` when the outcome is unknown.
    pub async fn propose(&self, _leader: Leader, cmd: Command) -> Result<Result<Outcome, RegistryError>, Status> {
        let entry = Entry::new(wall_clock_ms(), cmd);
        let r = self
            .raft
            .client_write(holdfast_raft::Request::new(entry.encode()))
            .await
            .map_err(|e| WriteError::from(e).to_status())?;
        let applied = Applied::decode(&r.data.payload)
            .map_err(|e| status(ErrorCode::Unavailable, format!("cannot decode the apply result: {e}"), None))?;
        Ok(applied.result)
    }

    /// Like [`Registry::propose`], with a refusal turned into its status.
    pub async fn write(&self, cmd: Command) -> Result<Outcome, Status> {
        let leader = self.assume_leader()?;
        self.propose(leader, cmd).await?.map_err(|e| registry_status(&e))
    }

    /// Runs `f` on a state that includes every write committed before this call
    /// (read index: the leader confirms it still leads with a quorum round).
    pub async fn read<T>(&self, f: impl FnOnce(&RegistryState) -> T) -> Result<T, Status> {
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

    /// Succeeds only while this leader holds openraft's leader lease (a quorum
    /// acknowledged it within the lease), without a network round. Ownership renewals
    /// are confirmed only under it, as the cell confirms session renewals.
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
        Some(id) => format!("not the leader; node {id} leads the registry"),
        None => "not the leader; no registry leader is known yet".to_owned(),
    };
    status(ErrorCode::NotLeader, msg, leader.map(|n| n.client_addr.as_str()).filter(|a| !a.is_empty()))
}

/// The leader's wall clock, stamped on entries for display and audit only.
pub(crate) fn wall_clock_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// The one mapping of registry refusals to gRPC statuses.
pub fn registry_status(e: &RegistryError) -> Status {
    status(e.code(), e.to_string(), None)
}
