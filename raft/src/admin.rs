//! The server side of `holdfast.raft.v1.RaftAdmin`: forming and resizing the group and
//! reading its health, for the CLI and the playground.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use holdfast_core::ErrorCode;
use holdfast_proto::raft::v1 as pb;
use holdfast_proto::raft::v1::raft_admin_server::{RaftAdmin, RaftAdminServer};
use openraft::Instant as _;
use tonic::{Request, Response, Status};
use tracing::info;

use crate::convert;
use crate::error::WriteError;
use crate::identity::DiskIdentity;
use crate::network::GrpcNetworkFactory;
use crate::sm_store::ReplicatedState;
use crate::types::{ChangeMembers, ClientWriteResponse, Node, NodeId, Raft, RaftMetrics, ServerState};
use holdfast_rpc::status::status;

/// Serves the admin RPCs of one node.
pub struct RaftAdminService<S: ReplicatedState> {
    raft: Raft<S>,
    /// This node's own id and disk.
    identity: DiskIdentity,
    /// Dials a joining member to learn its disk.
    peers: GrpcNetworkFactory,
}

impl<S: ReplicatedState> fmt::Debug for RaftAdminService<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RaftAdminService").field("node", self.raft.node_id()).finish()
    }
}

impl<S: ReplicatedState> RaftAdminService<S> {
    pub(crate) fn new(raft: Raft<S>, identity: DiskIdentity, peers: GrpcNetworkFactory) -> Self {
        RaftAdminService { raft, identity, peers }
    }

    async fn identified(&self, id: NodeId, node: Node, pristine: bool) -> Result<Node, Status> {
        crate::identity::joining(self.identity, &self.peers, id, node, pristine).await.map_err(|e| status(e.code(), e.to_string()))
    }

    pub fn into_server(self) -> RaftAdminServer<Self> {
        RaftAdminServer::new(self)
    }
}

fn member_node(m: &pb::Member) -> Result<(NodeId, Node), Status> {
    if m.raft_addr.is_empty() || m.client_addr.is_empty() {
        return Err(status(ErrorCode::InvalidArgument, format!("member {} needs both raft_addr and client_addr", m.node_id)));
    }
    Ok((m.node_id, Node::new(m.raft_addr.clone(), m.client_addr.clone())))
}

fn change_response(r: ClientWriteResponse) -> pb::MembershipChangeResponse {
    pb::MembershipChangeResponse { log_index: r.log_id.index, membership: r.membership.as_ref().map(convert::membership_to_pb) }
}

/// The metrics a node reports over `RaftAdmin.Metrics`.
pub fn metrics_to_pb(m: &RaftMetrics) -> pb::MetricsResponse {
    let membership = m.membership_config.membership();
    let leader_client_addr = m.current_leader.and_then(|l| membership.get_node(&l)).map(|n| n.client_addr.clone()).unwrap_or_default();
    let state = match m.state {
        ServerState::Leader => "Leader",
        ServerState::Follower => "Follower",
        ServerState::Candidate => "Candidate",
        ServerState::Learner => "Learner",
        ServerState::Shutdown => "Shutdown",
    };
    pb::MetricsResponse {
        node_id: m.id,
        server_state: state.to_string(),
        current_term: m.current_term,
        has_leader: m.current_leader.is_some(),
        leader_id: m.current_leader.unwrap_or_default(),
        leader_client_addr,
        has_log: m.last_log_index.is_some(),
        last_log_index: m.last_log_index.unwrap_or_default(),
        has_committed: m.local_committed.is_some(),
        commit_index: m.local_committed.as_ref().map_or(0, |l| l.index),
        has_applied: m.last_applied.is_some(),
        last_applied_index: m.last_applied.as_ref().map_or(0, |l| l.index),
        has_snapshot: m.snapshot.is_some(),
        snapshot_index: m.snapshot.as_ref().map_or(0, |l| l.index),
        has_purged: m.purged.is_some(),
        purged_index: m.purged.as_ref().map_or(0, |l| l.index),
        membership: Some(convert::membership_to_pb(membership)),
        millis_since_quorum_ack: m.last_quorum_acked.as_ref().map(|t| t.elapsed().as_millis() as u64),
    }
}

#[tonic::async_trait]
impl<S: ReplicatedState> RaftAdmin for RaftAdminService<S> {
    async fn initialize(&self, request: Request<pb::InitializeRequest>) -> Result<Response<pb::InitializeResponse>, Status> {
        let named: BTreeMap<NodeId, Node> = request.into_inner().members.iter().map(member_node).collect::<Result<_, _>>()?;
        if named.is_empty() {
            return Err(status(ErrorCode::InvalidArgument, "no members"));
        }
        info!(members = ?named.keys().collect::<Vec<_>>(), "initializing raft group");
        crate::node::initialize(&self.raft, self.identity, &self.peers, named).await.map_err(|e| e.to_status())?;
        Ok(Response::new(pb::InitializeResponse {}))
    }

    async fn add_learner(&self, request: Request<pb::AddLearnerRequest>) -> Result<Response<pb::MembershipChangeResponse>, Status> {
        let req = request.into_inner();
        let learner = req.learner.ok_or_else(|| status(ErrorCode::InvalidArgument, "no learner"))?;
        let (id, node) = member_node(&learner)?;
        let node = self.identified(id, node, false).await?;
        // A member known by another disk came back on a new one: it joins again only
        // once it was removed, so the group never counts it as holding what it lost.
        let known = crate::node::current_metrics(&self.raft).membership_config.membership().get_node(&id).cloned();
        if let Some(known) = known.filter(|k| k.disk != 0 && k.disk != node.disk) {
            return Err(status(
                ErrorCode::AlreadyExists,
                format!(
                    "node {id} is a member on disk {}, and now runs on disk {}: remove it from the group first, then add it again (docs/runbooks/lost-volume.md)",
                    crate::identity::disk_header(known.disk),
                    crate::identity::disk_header(node.disk)
                ),
            ));
        }
        info!(learner = id, %node, "adding learner");
        let r = self.raft.add_learner(id, node, req.blocking).await.map_err(|e| WriteError::from(e).to_status())?;
        Ok(Response::new(change_response(r)))
    }

    async fn change_membership(&self, request: Request<pb::ChangeMembershipRequest>) -> Result<Response<pb::MembershipChangeResponse>, Status> {
        let req = request.into_inner();
        let voters: BTreeSet<NodeId> = req.voters.into_iter().collect();
        if voters.is_empty() {
            return Err(status(ErrorCode::InvalidArgument, "no voters"));
        }
        info!(voters = ?voters, keep_removed_as_learners = req.keep_removed_as_learners, "changing membership");
        let r = self
            .raft
            .change_membership(ChangeMembers::ReplaceAllVoters(voters), req.keep_removed_as_learners)
            .await
            .map_err(|e| WriteError::from(e).to_status())?;
        Ok(Response::new(change_response(r)))
    }

    async fn metrics(&self, _request: Request<pb::MetricsRequest>) -> Result<Response<pb::MetricsResponse>, Status> {
        let m = crate::node::current_metrics(&self.raft);
        Ok(Response::new(metrics_to_pb(&m)))
    }
}
