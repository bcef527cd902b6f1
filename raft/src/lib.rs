//! holdfast-raft: the openraft substrate that the lock cells and the registry run on.
//!
//! What lives here:
//! - the one openraft type configuration and its aliases ([`types`]): commands and
//!   responses are opaque bytes, nodes carry a Raft and a client address;
//! - RocksDB storage: the log with synced votes and appends ([`LogStore`]) and the state
//!   machine adapter over the application's [`ReplicatedState`] with persisted snapshots
//!   ([`StateMachineStore`]), one tuned RocksDB per node ([`rocks`]);
//! - the tonic gRPC network: `holdfast.raft.v1.RaftService` client ([`GrpcNetworkFactory`])
//!   and server ([`RaftGrpcService`]), and the `RaftAdmin` service ([`RaftAdminService`]);
//! - [`RaftNode`], which starts all of that on one listener;
//! - what every node configuration shares ([`settings`]): layered loading, and the
//!   validation of the Raft timings and addresses;
//! - [`Group`], a server's handle on its running group: the [`Leader`] proof, proposals
//!   with a bounded wait, linearizable reads and the leader-lease check, each failure
//!   already the gRPC status clients expect;
//! - [`recover`]: a new group of one member from a stopped survivor's data directory
//!   (a group that lost its majority for good) or from a snapshot file;
//! - [`snapshot_file`]: the file `holdfast snapshot save` writes, and its checks;
//! - with feature `test-support`, a fault-injecting layer over the gRPC network and a
//!   toy state machine ([`testing`]).
//!
//! What does not: any application state (the lock table, the registry map), clocks or
//! leases of the application, and the client-facing APIs.
//!
//! Starting a 3-node group from code:
//! ```ignore
//! let mut nodes = Vec::new();
//! for id in 1..=3 {
//!     let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//!     let cfg = NodeConfig::new(id, "cell-a", dir.join(id.to_string()));
//!     nodes.push(RaftNode::start(cfg, listener, MyState::default()).await?);
//! }
//! let members = nodes.iter().map(|n| (n.id(), n.node().clone())).collect();
//! nodes[0].initialize(members).await?;
//! let applied = nodes[0].write(b"cmd".to_vec()).await?; // once node 1 leads
//! ```

mod admin;
pub mod backup;
mod convert;
mod error;
mod group;
pub mod identity;
mod log_store;
mod network;
mod node;
pub mod recover;
pub mod rocks;
pub mod runtime;
mod service;
mod serving;
pub mod settings;
mod sm_store;
pub mod snapshot_file;
pub mod stages;
pub mod types;

#[cfg(feature = "test-support")]
pub mod testing;

/// A mutex's guard; a poisoned one is taken as is (what it guards stays consistent
/// under a panic: queues of timestamps on a replication stream).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

pub use admin::{metrics_to_pb, RaftAdminService};
pub use convert::DecodeError;
pub use error::{InitError, StartError, WriteError};
pub use group::{wall_clock_ms, Group, Leader, PROPOSE_TIMEOUT, READ_TIMEOUT};
pub use log_store::LogStore;
pub use network::{GrpcConnection, GrpcNetworkFactory, NetworkOptions, SNAPSHOT_CHUNK_BYTES};
pub use node::{current_metrics, Applied, NodeConfig, RaftNode, RaftTimings};
pub use rocks::MemoryDisk;
pub use service::{RaftGrpcService, MAX_SNAPSHOT_BYTES};
pub use serving::{bind_optional, Failure, Serving};
pub use sm_store::{undecodable, ReplicatedState, SnapshotBuilder, StateHandle, StateMachineStore, WaitAppliedError};
pub use types::{Node, NodeId, Raft, ReadPolicy, Request, Response, TypeConfig};
