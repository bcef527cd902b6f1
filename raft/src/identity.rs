//! A node knows the disk it runs on, and its group knows it too.
//!
//! Raft's safety rests on every vote and every acknowledged entry surviving on the disk
//! that gave it. A node that comes back under its old id on an empty (or another) disk
//! has forgotten both: it would vote for a candidate missing entries it had acknowledged,
//! and two such nodes can elect a leader that lost a committed grant, so the cell hands
//! the same token out again. A Kubernetes StatefulSet whose volume was recreated does
//! exactly that.
//!
//! So, as etcd checks member and cluster ids:
//! - at its first start on a data directory, a node writes an identity there: its node
//!   id and a random disk id (synced). Later starts read it; a directory that belongs to
//!   another node id refuses to start ([`StartError::WrongNode`]).
//! - the membership records each member's disk ([`Node::disk`]), learned by asking the
//!   node itself (`RaftService.Identify`) when it joins: at `Initialize` and `AddLearner`.
//! - every Raft request names the disk its sender's membership records for the receiver
//!   (metadata [`DISK_HEADER`]); a receiver on another disk refuses it, so the group gets
//!   neither its vote nor its acknowledgements. It serves again only once it is removed
//!   and added back as a new member, which records its new disk
//!   (docs/runbooks/lost-volume.md).
//!
//! A member recorded with disk 0 (added by an older release) is not checked.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tonic::metadata::MetadataMap;
use tonic::Status;
use tracing::error;

use crate::error::StartError;
use crate::network::GrpcNetworkFactory;
use crate::rocks::{cf, decode, encode, io_err, synced, Db, CF_META};
use crate::types::Node;
use crate::types::NodeId;
use holdfast_core::ErrorCode;

/// The metadata of a Raft request that names the disk the sender expects the receiver on.
pub const DISK_HEADER: &str = "holdfast-disk";

const KEY_IDENTITY: &[u8] = b"identity";

/// What a node wrote on its data directory at its first start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskIdentity {
    pub node_id: NodeId,
    /// Random, never 0.
    pub disk: u64,
}

/// The directory's identity, if it has one (nothing is written).
pub(crate) fn read(db: &Db) -> std::io::Result<Option<DiskIdentity>> {
    match db.get_cf(cf(db, CF_META), KEY_IDENTITY).map_err(io_err)? {
        Some(bytes) => Ok(Some(decode(&bytes)?)),
        None => Ok(None),
    }
}

/// Reads the directory's identity, or writes one if it has none (a first start, or a
/// directory written by a release before identities). Refuses a directory of another node.
pub(crate) fn load_or_create(db: &Db, node_id: NodeId) -> Result<DiskIdentity, StartError> {
    let meta = cf(db, CF_META);
    if let Some(bytes) = db.get_cf(meta, KEY_IDENTITY).map_err(io_err)? {
        let id: DiskIdentity = decode(&bytes)?;
        if id.node_id != node_id {
            return Err(StartError::WrongNode { found: id.node_id, configured: node_id });
        }
        return Ok(id);
    }
    let id = DiskIdentity { node_id, disk: holdfast_rpc::entropy::random_u64().max(1) };
    db.put_cf_opt(meta, KEY_IDENTITY, encode(&id)?, &synced()).map_err(io_err)?;
    tracing::info!(node_id, disk = %format!("{:016x}", id.disk), "first start on this data directory: disk identity written");
    Ok(id)
}

/// The header value for `disk`.
pub fn disk_header(disk: u64) -> String {
    format!("{disk:016x}")
}

/// The receiving side's check of [`DISK_HEADER`]. Counts and logs what it refuses, so
/// a replaced disk is loud in the node's own log and metrics, not only at its peers.
#[derive(Debug, Clone)]
pub(crate) struct DiskCheck {
    disk: u64,
    node_id: NodeId,
    refused: Arc<AtomicU64>,
    last_logged: Arc<std::sync::Mutex<Option<Instant>>>,
}

impl DiskCheck {
    pub(crate) fn new(id: DiskIdentity) -> DiskCheck {
        DiskCheck { disk: id.disk, node_id: id.node_id, refused: Arc::default(), last_logged: Arc::default() }
    }

    /// `Err` when the request names another disk than this node's.
    pub(crate) fn check(&self, metadata: &MetadataMap) -> Result<(), Status> {
        let Some(named) = metadata.get(DISK_HEADER) else { return Ok(()) };
        let named = named.to_str().ok().and_then(|s| u64::from_str_radix(s, 16).ok());
        match named {
            Some(expected) if expected == self.disk => Ok(()),
            Some(expected) => Err(self.refuse(expected)),
            None => Err(Status::invalid_argument(format!("malformed {DISK_HEADER} metadata"))),
        }
    }

    fn refuse(&self, expected: u64) -> Status {
        self.refused.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(holdfast_core::metric_names::RAFT_DISK_REFUSED).increment(1);
        let mut last = self.last_logged.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
            *last = Some(Instant::now());
            error!(
                node_id = self.node_id,
                disk = %disk_header(self.disk),
                expected = %disk_header(expected),
                "the group knows this node by another disk: it came back on an empty or different data directory. \
                 It refuses to vote or acknowledge entries until it is removed and added again as a new member \
                 (docs/runbooks/lost-volume.md)"
            );
        }
        Status::failed_precondition(format!(
            "disk replaced: node {} runs on disk {}, the group's membership records {}; remove it and add it again as a new member",
            self.node_id,
            disk_header(self.disk),
            disk_header(expected)
        ))
    }

    /// How many requests were refused for naming another disk.
    pub(crate) fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// This node's id and disk.
    pub(crate) fn identity(&self) -> (NodeId, u64) {
        (self.node_id, self.disk)
    }
}

/// Whether `e` is a peer's refusal for being on another disk than the membership names.
pub(crate) fn is_disk_refusal(status: &Status) -> bool {
    status.code() == tonic::Code::FailedPrecondition && status.message().starts_with("disk replaced")
}

/// How long a joining member has to say who it is.
const IDENTIFY_WITHIN: Duration = Duration::from_secs(5);

/// Why a node may not join a group as named.
#[derive(Debug, thiserror::Error)]
pub enum JoinRefused {
    #[error("cannot ask node {id} at {addr} which disk it runs on ({why}); start it first")]
    Unreachable { id: NodeId, addr: String, why: String },
    #[error("the node at {addr} says it is node {said}, not node {id}")]
    WrongNode { id: NodeId, addr: String, said: NodeId },
    #[error("node {id} at {addr} already holds Raft state (it belongs to a group): initializing would form a second group")]
    HasState { id: NodeId, addr: String },
    #[error("node {id} at {addr} runs on disk {found}, not on the disk {named} it was named with")]
    OtherDisk { id: NodeId, addr: String, found: String, named: String },
}

impl JoinRefused {
    pub fn code(&self) -> ErrorCode {
        match self {
            JoinRefused::Unreachable { .. } => ErrorCode::Unavailable,
            JoinRefused::WrongNode { .. } | JoinRefused::OtherDisk { .. } => ErrorCode::InvalidArgument,
            JoinRefused::HasState { .. } => ErrorCode::AlreadyExists,
        }
    }
}

/// `node` as the membership will record it: with the disk the member itself reports
/// (`RaftService.Identify`). `own` is the asking node, which knows its own disk.
/// Refused when the member cannot be asked, says it is another node, runs on another
/// disk than `node` names, or (`pristine`, forming a group) already holds Raft state:
/// it belongs to a group, and forming another around it would make two.
pub(crate) async fn joining(own: DiskIdentity, peers: &GrpcNetworkFactory, id: NodeId, node: Node, pristine: bool) -> Result<Node, JoinRefused> {
    if id == own.node_id {
        return Ok(node.on_disk(own.disk));
    }
    let addr = node.raft_addr.clone();
    let who = peers.connect(id, &node).identify(IDENTIFY_WITHIN).await.map_err(|why| JoinRefused::Unreachable { id, addr: addr.clone(), why })?;
    if who.node_id != id {
        return Err(JoinRefused::WrongNode { id, addr, said: who.node_id });
    }
    if node.disk != 0 && node.disk != who.disk {
        return Err(JoinRefused::OtherDisk { id, addr, found: disk_header(who.disk), named: disk_header(node.disk) });
    }
    if pristine && who.has_state {
        return Err(JoinRefused::HasState { id, addr });
    }
    Ok(node.on_disk(who.disk))
}
