//! holdfast-registry-state: the pure ownership registry.
//!
//! [`RegistryState::apply`] is the only way to change it: one committed Raft entry in,
//! one [`Applied`] (result plus ownership events) out. It stores regions, cells,
//! versioned namespace configs and shard placement (home region, cell, epoch, transfer
//! state), and it bumps a shard's epoch on every completed transfer. It also stores who
//! may do what ([`Access`]: role grants, token hashes) and the durable audit log. It reads no clock,
//! draws no random number and does no I/O, so every replica that applies the same log
//! holds the same map.
//!
//! What does not live here: ownership leases and the decision that a source cell's
//! lease has run out (the registry leader measures those on its monotonic clock and
//! commits `CompleteMove`), Raft, networking, and the mapping of error codes to
//! gRPC/HTTP (that is `holdfast-core`).

mod access;
mod codec;
mod command;
mod failover;
mod outcome;
mod reads;
mod recovery;
mod state;
mod transfers;

pub use access::{Access, AuditRecord, TokenRecord, AUDIT_CAP, MAX_FIELD};
pub use codec::{CodecError, FORMAT_VERSION};
pub use command::{CellMember, Command, Entry};
pub use failover::{AutoMove, FailoverPolicy};
pub use outcome::{Applied, Outcome, OwnershipEvent, RegistryError};
pub use reads::{HistoryError, OwnedShard};
pub use recovery::{Recovery, RECOVERY_EPOCH_GAP, RECOVERY_REVISION_GAP};
pub use state::{CellRecord, Handover, Move, RegionState, RegistryState, SealReport, ShardRecord, ShardState, HISTORY_CAP};
