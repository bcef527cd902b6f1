//! `Registry`: what every handler of a registry server shares — its Raft [`Group`]
//! (leader proof, proposals, linearizable reads, the lease check), the applied
//! ownership map, the hooks — and the registry side of those calls: encoding commands
//! and decoding what the map answered.

use crate::machine::{Hooks, RegistryMachine};
use holdfast_core::ErrorCode;
use holdfast_raft::Group;
pub use holdfast_raft::{wall_clock_ms, Leader};
use holdfast_registry_state::{Applied, Command, Entry, Outcome, RegistryError, RegistryState};
use holdfast_rpc::status::status;
use std::sync::Arc;
use tonic::Status;

/// The shared core of a registry server.
#[derive(Debug)]
pub struct Registry {
    pub(crate) group: Group<RegistryMachine>,
    pub(crate) hooks: Arc<Hooks>,
    /// The node's tasks: watch streams run under the node's shutdown.
    pub(crate) tasks: holdfast_rpc::Tasks,
}

impl Registry {
    /// `Ok(Leader)` if this node leads the registry, else `NOT_LEADER` carrying the
    /// leader's client address (when known) in `holdfast-leader` metadata.
    pub fn assume_leader(&self) -> Result<Leader, Status> {
        self.group.assume_leader()
    }

    /// Commits `cmd` and returns what the registry answered. A Raft failure is a
    /// `Status`: `NOT_LEADER`, or `UNAVAILABLE` when the outcome is unknown.
    pub async fn propose(&self, leader: Leader, cmd: Command) -> Result<Result<Outcome, RegistryError>, Status> {
        let entry = Entry::new(wall_clock_ms(), cmd);
        let answer = self.group.propose(leader, entry.encode()).await?;
        let applied = Applied::decode(&answer).map_err(|e| status(ErrorCode::Unavailable, format!("cannot decode the apply result: {e}")))?;
        Ok(applied.result)
    }

    /// Like [`Registry::propose`], with a refusal turned into its status.
    pub async fn write(&self, cmd: Command) -> Result<Outcome, Status> {
        let leader = self.assume_leader()?;
        self.propose(leader, cmd).await?.map_err(|e| registry_status(&e))
    }

    /// [`Registry::write`] of an administrative action, recorded in the audit log (in
    /// the same entry) as done by `by` when it succeeds.
    pub async fn write_as(&self, by: &str, cmd: Command) -> Result<Outcome, Status> {
        self.write(Command::Audited { by: by.to_owned(), cmd: Box::new(cmd) }).await
    }

    /// Runs `f` on an ownership map that includes every write committed before this call.
    pub async fn read<T>(&self, f: impl FnOnce(&RegistryState) -> T) -> Result<T, Status> {
        self.group.read(|m| f(m.state())).await
    }

    /// Succeeds only while this leader holds openraft's leader lease, without a network
    /// round. Ownership renewals are confirmed only under it, as the cell confirms
    /// session renewals.
    pub async fn lease_check(&self) -> Result<Leader, Status> {
        self.group.lease_check().await
    }
}

/// The one mapping of registry refusals to gRPC statuses.
pub fn registry_status(e: &RegistryError) -> Status {
    status(e.code(), e.to_string())
}
