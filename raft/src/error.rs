//! Errors of the Raft substrate, each knowing whether a retry can help, and their one
//! mapping to gRPC statuses (written the wire edge's way: `holdfast_rpc::status`).

use std::io;

use holdfast_core::ErrorCode;
use openraft::errors::{ChangeMembershipError, ForwardReason};

use crate::types::{ClientWriteError, Fatal, ForwardToLeader, InitializeError, Node, NodeId, RaftError};

/// Starting a node failed.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("opening RocksDB: {0}")]
    Storage(#[from] rocksdb::Error),
    #[error("reading persisted state: {0}")]
    Io(#[from] io::Error),
    #[error("invalid raft config: {0}")]
    Config(#[from] openraft::ConfigError),
    #[error("starting raft: {0}")]
    Raft(#[from] Fatal),
    /// The data directory was written by another node id: a directory mixed up with
    /// another node's, which must not start as this one.
    #[error("this data directory belongs to node {found}, not to node {configured}: refusing to start on another node's disk")]
    WrongNode { found: NodeId, configured: NodeId },
}

/// A write (or membership change) did not produce an outcome.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// This node is not the leader; nothing was appended. `leader` is the current leader
    /// if known: retry there.
    #[error("not the leader (leader: {leader_id:?})")]
    NotLeader { leader_id: Option<NodeId>, leader: Option<Node> },
    /// This node leads but has not heard from a quorum within the leader lease (just
    /// elected, or cut off from the majority); nothing was appended. Retry shortly.
    #[error("leader without quorum contact (lease not valid)")]
    NoQuorum,
    /// The entry was appended but may or may not commit (the leader changed, or the call
    /// timed out). Treat as unknown: a retry must be deduplicated by the application.
    #[error("outcome unknown: {0}")]
    Unknown(String),
    /// Another membership change (or this leader's first entry) has not committed yet;
    /// nothing was appended. Retry shortly.
    #[error("membership change busy: {0}")]
    MembershipBusy(String),
    /// The membership change is invalid (unknown learner, empty voter set, ...).
    #[error("membership change refused: {0}")]
    Membership(String),
    /// The node is shut down or stopped on a storage error.
    #[error("raft node stopped: {0}")]
    Stopped(String),
}

impl WriteError {
    /// May the same request be sent again (deduplicated) and succeed?
    pub fn is_retryable(&self) -> bool {
        !matches!(self, WriteError::Membership(_))
    }

    pub fn code(&self) -> ErrorCode {
        match self {
            WriteError::NotLeader { .. } => ErrorCode::NotLeader,
            WriteError::NoQuorum | WriteError::MembershipBusy(_) | WriteError::Unknown(_) | WriteError::Stopped(_) => ErrorCode::Unavailable,
            WriteError::Membership(_) => ErrorCode::InvalidArgument,
        }
    }

    /// The gRPC status, with the code (and leader hint) in metadata.
    pub fn to_status(&self) -> tonic::Status {
        match self {
            WriteError::NotLeader { leader, .. } => not_leader(self.to_string(), leader.as_ref().map(|n| n.client_addr.as_str())),
            _ => status(self.code(), self.to_string()),
        }
    }
}

fn forward(f: &ForwardToLeader) -> WriteError {
    match f.reason {
        ForwardReason::LeaseExpired => WriteError::NoQuorum,
        ForwardReason::NotLeader | ForwardReason::LeadershipTransfer => WriteError::NotLeader { leader_id: f.leader_id, leader: f.leader_node.clone() },
    }
}

impl From<RaftError<ClientWriteError>> for WriteError {
    fn from(e: RaftError<ClientWriteError>) -> Self {
        match e {
            RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => forward(&f),
            RaftError::APIError(ClientWriteError::LogEntryDiscarded(f)) => {
                WriteError::Unknown(format!("entry discarded on a leader change; leader now {:?}", f.leader_id))
            }
            RaftError::APIError(ClientWriteError::ChangeMembershipError(
                e @ (ChangeMembershipError::InProgress(_) | ChangeMembershipError::UncommittedLeaderLog(_)),
            )) => WriteError::MembershipBusy(e.to_string()),
            RaftError::APIError(e @ ClientWriteError::ChangeMembershipError(_)) => WriteError::Membership(e.to_string()),
            RaftError::APIError(e @ ClientWriteError::PreconditionFailed(_)) => WriteError::Membership(e.to_string()),
            RaftError::Fatal(f) => WriteError::Stopped(f.to_string()),
        }
    }
}

/// `Initialize` failed.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// The node already has a log or a vote: the group exists.
    #[error("not allowed: {0}")]
    NotAllowed(String),
    #[error("raft node stopped: {0}")]
    Stopped(String),
    /// A first member cannot be asked for its disk, or must not join (`identity.rs`).
    #[error(transparent)]
    Member(#[from] crate::identity::JoinRefused),
}

impl From<RaftError<InitializeError>> for InitError {
    fn from(e: RaftError<InitializeError>) -> Self {
        match e {
            RaftError::APIError(e) => InitError::NotAllowed(e.to_string()),
            RaftError::Fatal(f) => InitError::Stopped(f.to_string()),
        }
    }
}

impl InitError {
    pub fn to_status(&self) -> tonic::Status {
        match self {
            // Not an argument problem but a state one: the group already exists.
            InitError::NotAllowed(_) => {
                let mut s = tonic::Status::failed_precondition(self.to_string());
                s.metadata_mut().insert(CODE_METADATA, tonic::metadata::MetadataValue::from_static(ErrorCode::InvalidArgument.as_str()));
                s
            }
            InitError::Stopped(_) => status(ErrorCode::Unavailable, self.to_string()),
            InitError::Member(e) => status(e.code(), self.to_string()),
        }
    }
}

use holdfast_rpc::status::{not_leader, status, CODE_METADATA};
