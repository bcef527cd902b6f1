//! The one openraft type configuration of holdfast, and the aliases everything else uses.
//! No other file (in this crate or outside) spells openraft's generic parameters.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::sm_store::StateMachineStore;

/// A Raft node id. Never reused within a group (a reused id is a reverted log).
pub type NodeId = u64;

/// An application command, opaque to Raft: the state machine on top decodes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    pub payload: Vec<u8>,
}

impl Request {
    pub fn new(payload: impl Into<Vec<u8>>) -> Self {
        Request { payload: payload.into() }
    }
}

impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "request({} bytes)", self.payload.len())
    }
}

/// What applying a command returned, opaque to Raft. Blank and membership entries
/// produce an empty payload.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Response {
    pub payload: Vec<u8>,
}

/// Where a node is reached: peers dial `raft_addr` (host:port), clients are redirected to
/// `client_addr` (host:port). Both travel in every membership entry.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Node {
    pub raft_addr: String,
    pub client_addr: String,
}

impl Node {
    pub fn new(raft_addr: impl Into<String>, client_addr: impl Into<String>) -> Self {
        Node { raft_addr: raft_addr.into(), client_addr: client_addr.into() }
    }
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "raft={} client={}", self.raft_addr, self.client_addr)
    }
}

openraft::declare_raft_types!(
    /// holdfast's Raft types: opaque byte commands and responses, `u64` node ids, nodes with
    /// a Raft and a client address, tokio with holdfast's randomness ([`crate::runtime`]).
    pub TypeConfig:
        D = Request,
        R = Response,
        NodeId = NodeId,
        Node = Node,
        AsyncRuntime = crate::runtime::Runtime,
);

/// The data of a snapshot as it travels and is stored: the application's serialized state.
pub type SnapshotData = Vec<u8>;

/// A Raft node running the application state machine `S`.
pub type Raft<S> = openraft::Raft<TypeConfig, StateMachineStore<S>>;
pub type Config = openraft::Config;
/// How a read is made linearizable: `ReadIndex` (a quorum round) or `LeaseRead` (the
/// leader lease, no round trip).
pub type ReadPolicy = openraft::ReadPolicy;
pub type SnapshotPolicy = openraft::SnapshotPolicy;
pub type ServerState = openraft::ServerState;
pub type LeaderId = openraft::impls::leader_id_adv::LeaderId<u64, NodeId>;
pub type LogId = openraft::type_config::alias::LogIdOf<TypeConfig>;
pub type Vote = openraft::type_config::alias::VoteOf<TypeConfig>;
pub type Entry = openraft::type_config::alias::EntryOf<TypeConfig>;
pub type EntryPayload = openraft::type_config::alias::EntryPayloadOf<TypeConfig>;
pub type Membership = openraft::Membership<NodeId, Node>;
pub type StoredMembership = openraft::type_config::alias::StoredMembershipOf<TypeConfig>;
pub type SnapshotMeta = openraft::type_config::alias::SnapshotMetaOf<TypeConfig>;
pub type Snapshot = openraft::type_config::alias::SnapshotOf<TypeConfig, SnapshotData>;
pub type RaftMetrics = openraft::RaftMetrics<TypeConfig>;
pub type ChangeMembers = openraft::ChangeMembers<NodeId, Node>;
pub type ClientWriteResponse = openraft::raft::ClientWriteResponse<TypeConfig>;
pub type AppendEntriesRequest = openraft::raft::AppendEntriesRequest<TypeConfig>;
pub type AppendEntriesResponse = openraft::raft::AppendEntriesResponse<TypeConfig>;
pub type StreamAppendResult = openraft::raft::StreamAppendResult<TypeConfig>;
pub type StreamAppendError = openraft::raft::StreamAppendError<TypeConfig>;
pub type VoteRequest = openraft::raft::VoteRequest<TypeConfig>;
pub type VoteResponse = openraft::raft::VoteResponse<TypeConfig>;
pub type TransferLeaderRequest = openraft::raft::TransferLeaderRequest<TypeConfig>;
pub type TransferLeaderResponse = openraft::raft::TransferLeaderResponse<TypeConfig>;
pub type TransferLeaderError = openraft::raft::TransferLeaderError<TypeConfig>;
pub type SnapshotResponse = openraft::raft::SnapshotResponse<TypeConfig>;
pub type ForwardToLeader = openraft::errors::ForwardToLeader<TypeConfig>;
pub type ClientWriteError = openraft::errors::ClientWriteError<TypeConfig>;
pub type RaftError<E = openraft::errors::Infallible> = openraft::errors::RaftError<TypeConfig, E>;
pub type RpcError = openraft::errors::RPCError<TypeConfig>;
pub type StreamingError = openraft::errors::StreamingError<TypeConfig>;
pub type WaitError = openraft::metrics::WaitError;
pub type IoFlushed = openraft::storage::IOFlushed<TypeConfig>;
pub type EntryResponder = openraft::storage::EntryResponder<TypeConfig>;

/// The index of a log id, `None` for "nothing yet".
pub fn index_of(log_id: Option<&LogId>) -> Option<u64> {
    log_id.map(|l| l.index)
}
pub type Fatal = openraft::errors::Fatal<TypeConfig>;
pub type InitializeError = openraft::errors::InitializeError<TypeConfig>;
