//! The gRPC front: LockService and RegistryService for clients, each call handed to
//! [`Gateway`]. The registry's cell-facing calls (RenewOwnership, ReportSealed) are not
//! served here: only cells make them, directly.

use crate::gateway::Gateway;
use holdfast_core::ErrorCode;
use holdfast_proto::lock::v1 as pb;
use holdfast_proto::lock::v1::lock_service_server::LockService;
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
        // Without a claimed identity, the audit names the connection the break came
        // from, here, rather than the gateway's own at the cell.
        let ctx = match ctx.claimed_identity {
            Some(_) => ctx,
            None => {
                let who = format!("{} via gateway", ctx.identity());
                ctx.acting_for(who)
            }
        };
        self.0.break_lock(&ctx, r).await.map(Response::new)
    }
}

#[derive(Debug, Clone)]
pub struct RegistryFront(pub Gateway);

/// The RegistryService impl: every listed unary call forwarded to the registry's
/// leader, plus the watch and the two cell-only calls. (One macro for the whole impl:
/// `async_trait` must see the methods already expanded.)
macro_rules! registry_front {
    ($(($name:ident, $req:ty, $resp:ty)),* $(,)?) => {
        #[tonic::async_trait]
        impl RegistryService for RegistryFront {
            $(
                async fn $name(&self, r: Request<$req>) -> Result<Response<$resp>, Status> {
                    let (ctx, req) = split(r);
                    self.0.registry(&ctx, req, |mut c, r| async move { c.$name(r).await }).await.map(Response::new)
                }
            )*

            type WatchOwnershipStream = BoxStream<rpb::OwnershipEvent>;

            async fn watch_ownership(&self, r: Request<rpb::WatchOwnershipRequest>) -> Result<Response<Self::WatchOwnershipStream>, Status> {
                let (ctx, req) = split(r);
                let s = self.0.registry(&ctx, req, |mut c, r| async move { c.watch_ownership(r).await }).await?;
                Ok(Response::new(Box::pin(s)))
            }

            async fn renew_ownership(&self, _: Request<rpb::RenewOwnershipRequest>) -> Result<Response<rpb::RenewOwnershipResponse>, Status> {
                Err(status(ErrorCode::PermissionDenied, "RenewOwnership is for cells, which call the registry directly"))
            }

            async fn report_sealed(&self, _: Request<rpb::ReportSealedRequest>) -> Result<Response<rpb::ReportSealedResponse>, Status> {
                Err(status(ErrorCode::PermissionDenied, "ReportSealed is for cells, which call the registry directly"))
            }
        }
    };
}

registry_front!(
    (create_region, rpb::CreateRegionRequest, rpb::CreateRegionResponse),
    (set_region_state, rpb::SetRegionStateRequest, rpb::SetRegionStateResponse),
    (register_cell, rpb::RegisterCellRequest, rpb::RegisterCellResponse),
    (list_regions, rpb::ListRegionsRequest, rpb::ListRegionsResponse),
    (list_cells, rpb::ListCellsRequest, rpb::ListCellsResponse),
    (create_namespace, rpb::CreateNamespaceRequest, rpb::CreateNamespaceResponse),
    (update_namespace, rpb::UpdateNamespaceRequest, rpb::UpdateNamespaceResponse),
    (get_namespace, rpb::GetNamespaceRequest, rpb::GetNamespaceResponse),
    (list_namespaces, rpb::ListNamespacesRequest, rpb::ListNamespacesResponse),
    (place_shard, rpb::PlaceShardRequest, rpb::PlaceShardResponse),
    (get_owner, rpb::GetOwnerRequest, rpb::GetOwnerResponse),
    (list_shards, rpb::ListShardsRequest, rpb::ListShardsResponse),
    (move_shard, rpb::MoveShardRequest, rpb::MoveShardResponse),
    (abort_move, rpb::AbortMoveRequest, rpb::AbortMoveResponse),
);
