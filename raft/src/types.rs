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

/// Where a node is reached, and which disk the group knows it by: peers dial
/// `raft_addr` (host:port), clients are redirected to `client_addr` (host:port). All
/// three travel in every membership entry.
///
/// `disk` is the identity the node wrote on its data directory at its first start
/// ([`crate::identity`]): a node that comes back under the same id on an empty or
/// different disk has a different one, and the group refuses it (no vote, no append)
/// until it is removed and added again as a new member. 0: not known (a member added by
/// a release before disk identities, or an address typed by hand); nothing is checked.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Node {
    pub raft_addr: String,
    pub client_addr: String,
    pub disk: u64,
}

impl Node {
    pub fn new(raft_addr: impl Into<String>, client_addr: impl Into<String>) -> Self {
        Node { raft_addr: raft_addr.into(), client_addr: client_addr.into(), disk: 0 }
    }

    /// The same node, known by the disk `disk`.
    pub fn on_disk(mut self, disk: u64) -> Self {
        self.disk = disk;
        self
    }
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "raft={} client={}", self.raft_addr, self.client_addr)?;
        if self.disk != 0 {
            write!(f, " disk={:016x}", self.disk)?;
        }
        Ok(())
    }
}

std::thread_local! {
    /// Set while a record of format version 1 is decoded (`rocks.rs`): its nodes were
    /// written without a disk. The encoding is bincode, which is not self-describing, so
    /// the reader must be told the shape; a thread-local is how serde's derive lets a
    /// nested type learn it without threading a seed through openraft's types.
    static NODES_WITHOUT_DISK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with nodes decoded in their version 1 shape (no disk).
pub(crate) fn nodes_without_disk<T>(f: impl FnOnce() -> T) -> T {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            NODES_WITHOUT_DISK.with(|c| c.set(false));
        }
    }
    NODES_WITHOUT_DISK.with(|c| c.set(true));
    let _reset = Reset;
    f()
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct V1 {
            raft_addr: String,
            client_addr: String,
        }
        #[derive(Deserialize)]
        struct V2 {
            raft_addr: String,
            client_addr: String,
            disk: u64,
        }
        if NODES_WITHOUT_DISK.with(std::cell::Cell::get) {
            let n = V1::deserialize(d)?;
            return Ok(Node { raft_addr: n.raft_addr, client_addr: n.client_addr, disk: 0 });
        }
        let n = V2::deserialize(d)?;
        Ok(Node { raft_addr: n.raft_addr, client_addr: n.client_addr, disk: n.disk })
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
