//! holdfast-core: the words of holdfast as types.
//!
//! What lives here: id newtypes ([`SessionId`], [`Epoch`], [`FencingToken`], names),
//! the enums shared by every layer ([`Mode`], [`EndReason`], [`Intent`], [`Posture`]),
//! the namespace configuration with its validation, roles and grants ([`Role`], [`Grant`]), the one table of stable
//! error codes with their gRPC and HTTP mappings ([`ErrorCode`]), and the versioned
//! framing of persisted records ([`codec`]: magic, version, bincode).
//!
//! What does not: anything that does I/O, reads a clock, or knows tokio, tonic,
//! openraft or RocksDB. Every other crate depends on this one, so it stays small.

mod access;
pub mod codec;
mod error;
mod ids;
pub mod metric_names;
mod names;
mod namespace;
mod token;
mod words;

pub use access::{valid_principal_name, Grant, Role, MAX_PRINCIPAL_NAME_BYTES};
pub use error::{ErrorCode, GrpcCode};
pub use ids::{NodeId, Revision, SessionId, MAX_RENEWAL_BATCH};
pub use names::{
    validate_value, CellId, LockName, NameError, NamespaceName, RegionId, RequestId, ShardKey, ShardName, MAX_LOCK_NAME_BYTES, MAX_REQUEST_ID_BYTES,
    MAX_SHORT_NAME_BYTES, MAX_VALUE_BYTES,
};
pub use namespace::{ConfigError, Intent, NamespaceConfig, Posture, Quotas};
pub use token::{Epoch, FencingToken, Seq, TokenError};
pub use words::UnknownWord;

use serde::{Deserialize, Serialize};

/// How a lock is held: one exclusive holder, or many shared holders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Mode {
    Exclusive,
    Shared,
}

/// The one list of reasons a hold ends. Watch events, Describe's last break record
/// and errors all use it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EndReason {
    /// The holder released it with its token (or closed its session).
    Released,
    /// The holder's session lease ran out.
    Expired,
    /// An administrator broke it (BreakLock).
    Broken,
    /// The namespace's max hold was reached.
    MaxHold,
    /// The shard left this cell.
    Moved,
}

impl EndReason {
    /// Stable wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            EndReason::Released => "RELEASED",
            EndReason::Expired => "EXPIRED",
            EndReason::Broken => "BROKEN",
            EndReason::MaxHold => "MAX_HOLD",
            EndReason::Moved => "MOVED",
        }
    }

    /// A hold that ended any way but a release triggers the namespace's lock-delay:
    /// the holder may still be acting on its resource.
    pub fn triggers_lock_delay(self) -> bool {
        !matches!(self, EndReason::Released)
    }
}

impl std::fmt::Display for EndReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The bound holdfast assumes on how far two nodes' monotonic clocks can run at
/// different rates: 1 part in 1,000 (0.1 %; a crystal drifts by about 0.01 %, and NTP
/// slews a clock by at most 0.05 %). A lease measured on one node and judged on another
/// must allow this fraction of its length, beside any fixed margin: the ownership
/// lease's cell margin and registry grace do (docs/registry.md).
pub const CLOCK_RATE_BOUND_DENOMINATOR: u32 = 1_000;

/// The registry's ownership lease unless configured (`ownership_lease_ms`): how long a
/// cell serves what it owns with the registry away (docs/registry.md, "Static
/// stability"), and how long a gateway serves on its last access policy. 35 minutes,
/// so that a 30-minute outage is ridden out with minutes to spare.
pub const DEFAULT_OWNERSHIP_LEASE: std::time::Duration = std::time::Duration::from_secs(35 * 60);

/// The part of `span` two clocks may disagree on over it ([`CLOCK_RATE_BOUND_DENOMINATOR`]).
pub fn clock_rate_allowance(span: std::time::Duration) -> std::time::Duration {
    span / CLOCK_RATE_BOUND_DENOMINATOR
}

/// Environment variables the `holdfast` command line reads for itself (which servers to
/// talk to, which playground to drill). Server configuration loaders skip them: they are
/// not server settings, and a node's config refuses unknown keys. None of them names a
/// server setting (`HOLDFAST_<KEY>`), so exporting one never changes a server's
/// configuration; the command line's tests check that this list is exactly the
/// variables its flags read.
pub const CLI_ONLY_ENV: &[&str] =
    &["HOLDFAST_ENDPOINTS", "HOLDFAST_RAFT_ENDPOINT", "HOLDFAST_REGISTRY_RAFT", "HOLDFAST_PLAYGROUND", "HOLDFAST_CERTS_DIR", "HOLDFAST_USER"];
