//! The gRPC front: LockService and RegistryService for clients, each call handed to
//! [`Gateway`] with what it needs (docs/security.md). The registry's node-only calls
//! (RenewOwnership, ReportSealed, AppendAudit) are not served here: only nodes make
//! them, directly.

use crate::access::Need;
use crate::gateway::Gateway;
use holdfast_core::{ErrorCode, Role};
use holdfast_proto::lock::v1 as pb;
use holdfast_proto::lock::v1::lock_service_server::LockService;
use holdfast_proto::raft::v1 as raftpb;
use holdfast_proto::registry::v1 as rpb;
use holdfast_proto::registry::v1::registry_service_server::RegistryService;
use holdfast_rpc::status::status;
use holdfast_rpc::CallContext;
use std::pin::Pin;
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

#[derive(Debug, Clone)]
pub struct LockFront(pub Gateway);

/// `CallContext` of the request, then the request's message.
fn split<T>(r: Request<T>) -> (CallContext, T) {
    (CallContext::from_grpc(&r), r.into_inner())
}

#[tonic::async_trait]
impl LockService for LockFront {
    async fn create_session(&self, r: Request<pb::CreateSessionRequest>) -> Result<Response<pb::CreateSessionResponse>, Status> {
        let (ctx, r) = split(r);
        self.0.create_session(&ctx, r).await.map(Response::new)
    }

    type KeepAliveStream = BoxStream<pb::KeepAliveResponse>;

    /// A renewal stream names its shard in its first message (`shard`); the gateway
    /// opens the stream at that shard's cell and forwards both ways.
    async fn keep_alive(&self, r: Request<Streaming<pb::KeepAliveRequest>>) -> Result<Response<Self::KeepAliveStream>, Status> {
        let (ctx, mut inbound) = split(r);
        let first = inbound.message().await?.ok_or_else(|| status(ErrorCode::InvalidArgument, "empty KeepAlive stream"))?;
        let upstream = self.0.keep_alive(&ctx, first, Some(inbound)).await?;
        Ok(Response::new(Box::pin(upstream)))
    }

    async fn close_session(&self, r: Request<pb::CloseSessionRequest>) -> Result<Response<pb::CloseSessionResponse>, Status> {
        let (ctx, r) = split(r);
        self.0.close_session(&ctx, r).await.map(Response::new)
    }

    async fn acquire(&self, r: Request<pb::AcquireRequest>) -> Result<Response<pb::AcquireResponse>, Status> {
        let (ctx, r) = split(r);
        self.0.acquire(&ctx, r).await.map(Response::new)
    }

    async fn release(&self, r: Request<pb::ReleaseRequest>) -> Result<Response<pb::ReleaseResponse>, Status> {
        let (ctx, r) = split(r);
        self.0.release(&ctx, r).await.map(Response::new)
    }

    async fn describe(&self, r: Request<pb::DescribeRequest>) -> Result<Response<pb::DescribeResponse>, Status> {
        let (ctx, r) = split(r);
        self.0.describe(&ctx, r).await.map(Response::new)
    }

    async fn list(&self, r: Request<pb::ListRequest>) -> Result<Response<pb::ListResponse>, Status> {
        let (ctx, r) = split(r);
        self.0.list(&ctx, r).await.map(Response::new)
    }

    async fn list_sessions(&self, r: Request<pb::ListSessionsRequest>) -> Result<Response<pb::ListSessionsResponse>, Status> {
        let (ctx, r) = split(r);
        self.0.list_sessions(&ctx, r).await.map(Response::new)
    }

    type WatchStream = BoxStream<pb::WatchResponse>;

    async fn watch(&self, r: Request<pb::WatchRequest>) -> Result<Response<Self::WatchStream>, Status> {
        let (ctx, r) = split(r);
        let s = self.0.watch(&ctx, r).await?;
        Ok(Response::new(Box::pin(s)))
    }

    async fn check_token(&self, r: Request<pb::CheckTokenRequest>) -> Result<Response<pb::CheckTokenResponse>, Status> {
        let (ctx, r) = split(r);
        self.0.check_token(&ctx, r).await.map(Response::new)
    }

    async fn break_lock(&self, r: Request<pb::BreakLockRequest>) -> Result<Response<pb::BreakLockResponse>, Status> {
        let (ctx, r) = split(r);
        self.0.break_lock(&ctx, r).await.map(Response::new)
    }
}

#[derive(Debug, Clone)]
pub struct RegistryFront(pub Gateway);

/// The RegistryService impl: every listed unary call forwarded to the registry's
/// leader for a caller with what it needs (each entry's last part), plus the watch;
/// the calls only nodes make are refused. (One macro for the whole impl:
/// `async_trait` must see the methods already expanded.)
macro_rules! registry_front {
    ($(($name:ident, $req:ty, $resp:ty, |$r:ident| $need:expr)),* $(,)?) => {
        #[tonic::async_trait]
        impl RegistryService for RegistryFront {
            $(
                async fn $name(&self, r: Request<$req>) -> Result<Response<$resp>, Status> {
                    let (ctx, req) = split(r);
                    let need = { let $r = &req; $need }?;
                    self.0.registry(&ctx, need, req, |mut c, r| async move { c.$name(r).await }).await.map(Response::new)
                }
            )*

            /// From the gateway's placement cache unless the request asks for `fresh`.
            async fn get_owner(&self, r: Request<rpb::GetOwnerRequest>) -> Result<Response<rpb::GetOwnerResponse>, Status> {
                let (ctx, req) = split(r);
                self.0.get_owner(&ctx, req).await.map(Response::new)
            }

            type WatchOwnershipStream = BoxStream<rpb::OwnershipEvent>;

            async fn watch_ownership(&self, r: Request<rpb::WatchOwnershipRequest>) -> Result<Response<Self::WatchOwnershipStream>, Status> {
                let (ctx, req) = split(r);
                let need = Need::ns_or_operator(Role::Reader, &req.ns)?;
                let s = self.0.registry(&ctx, need, req, |mut c, r| async move { c.watch_ownership(r).await }).await?;
                Ok(Response::new(Box::pin(s)))
            }

            type SaveSnapshotStream = BoxStream<raftpb::SnapshotChunk>;

            /// The registry's snapshot file, for an operator (`holdfast snapshot save --registry`).
            async fn save_snapshot(&self, r: Request<raftpb::SaveSnapshotRequest>) -> Result<Response<Self::SaveSnapshotStream>, Status> {
                let (ctx, req) = split(r);
                let s = self.0.registry(&ctx, Need::Operator, req, |mut c, r| async move { c.save_snapshot(r).await }).await?;
                Ok(Response::new(Box::pin(s)))
            }

            async fn renew_ownership(&self, _: Request<rpb::RenewOwnershipRequest>) -> Result<Response<rpb::RenewOwnershipResponse>, Status> {
                Err(nodes_only("RenewOwnership"))
            }

            async fn report_sealed(&self, _: Request<rpb::ReportSealedRequest>) -> Result<Response<rpb::ReportSealedResponse>, Status> {
                Err(nodes_only("ReportSealed"))
            }

            async fn append_audit(&self, _: Request<rpb::AppendAuditRequest>) -> Result<Response<rpb::AppendAuditResponse>, Status> {
                Err(nodes_only("AppendAudit"))
            }
        }
    };
}

fn nodes_only(call: &str) -> Status {
    status(ErrorCode::PermissionDenied, format!("{call} is for holdfast nodes, which call the registry directly"))
}

const OPERATOR: Result<Need, Status> = Ok(Need::Operator);

registry_front!(
    (create_region, rpb::CreateRegionRequest, rpb::CreateRegionResponse, |_r| OPERATOR),
    (set_region_state, rpb::SetRegionStateRequest, rpb::SetRegionStateResponse, |_r| OPERATOR),
    (register_cell, rpb::RegisterCellRequest, rpb::RegisterCellResponse, |_r| OPERATOR),
    (retire_cell, rpb::RetireCellRequest, rpb::RetireCellResponse, |_r| OPERATOR),
    (list_regions, rpb::ListRegionsRequest, rpb::ListRegionsResponse, |_r| OPERATOR),
    (list_cells, rpb::ListCellsRequest, rpb::ListCellsResponse, |_r| OPERATOR),
    (create_namespace, rpb::CreateNamespaceRequest, rpb::CreateNamespaceResponse, |_r| OPERATOR),
    (update_namespace, rpb::UpdateNamespaceRequest, rpb::UpdateNamespaceResponse, |r| Need::ns(Role::Admin, r.config.as_ref().map_or("", |c| c.name.as_str()))),
    (get_namespace, rpb::GetNamespaceRequest, rpb::GetNamespaceResponse, |r| Need::ns(Role::Reader, &r.name)),
    (list_namespaces, rpb::ListNamespacesRequest, rpb::ListNamespacesResponse, |_r| OPERATOR),
    (set_auto_failover, rpb::SetAutoFailoverRequest, rpb::SetAutoFailoverResponse, |_r| OPERATOR),
    (place_shard, rpb::PlaceShardRequest, rpb::PlaceShardResponse, |_r| OPERATOR),
    (list_shards, rpb::ListShardsRequest, rpb::ListShardsResponse, |r| if r.cell.is_empty() { Need::ns_or_operator(Role::Reader, &r.ns) } else { OPERATOR }),
    (move_shard, rpb::MoveShardRequest, rpb::MoveShardResponse, |_r| OPERATOR),
    (abort_move, rpb::AbortMoveRequest, rpb::AbortMoveResponse, |_r| OPERATOR),
    (grant_role, rpb::GrantRoleRequest, rpb::GrantRoleResponse, |_r| OPERATOR),
    (revoke_role, rpb::RevokeRoleRequest, rpb::RevokeRoleResponse, |_r| OPERATOR),
    (create_token, rpb::CreateTokenRequest, rpb::CreateTokenResponse, |_r| OPERATOR),
    (revoke_token, rpb::RevokeTokenRequest, rpb::RevokeTokenResponse, |_r| OPERATOR),
    (list_access, rpb::ListAccessRequest, rpb::ListAccessResponse, |_r| OPERATOR),
    (list_audit, rpb::ListAuditRequest, rpb::ListAuditResponse, |_r| OPERATOR),
    (raft_status, rpb::RaftStatusRequest, rpb::RaftStatusResponse, |_r| OPERATOR),
);
