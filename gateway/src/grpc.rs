//! The gRPC front: LockService and RegistryService for clients, each call handed to
//! [`Gateway`]. The registry's cell-facing calls (RenewOwnership, ReportSealed) are not
//! served here: only cells make them, directly.

use crate::gateway::{shard_of, Gateway};
use holdfast_core::ErrorCode;
use holdfast_proto::lock::v1 as pb;
use holdfast_proto::lock::v1::lock_service_server::LockService;
use holdfast_proto::registry::v1 as rpb;
use holdfast_proto::registry::v1::registry_service_server::RegistryService;
use holdfast_proto::status::status;
use std::pin::Pin;
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

#[derive(Debug, Clone)]
pub struct LockFront(pub Gateway);

#[tonic::async_trait]
impl LockService for LockFront {
    async fn create_session(&self, r: Request<pb::CreateSessionRequest>) -> Result<Response<pb::CreateSessionResponse>, Status> {
        self.0.create_session(r.into_inner()).await.map(Response::new)
    }

    type KeepAliveStream = BoxStream<pb::KeepAliveResponse>;

    /// A renewal stream names its shard in its first message (`shard`); the gateway
    /// opens the stream at that shard's cell and forwards both ways.
    async fn keep_alive(&self, r: Request<Streaming<pb::KeepAliveRequest>>) -> Result<Response<Self::KeepAliveStream>, Status> {
        let mut inbound = r.into_inner();
        let first = inbound.message().await?.ok_or_else(|| status(ErrorCode::InvalidArgument, "empty KeepAlive stream".into(), None))?;
        let key = shard_of(&first.shard)
            .map_err(|_| status(ErrorCode::InvalidArgument, "through a gateway, the first KeepAlive message must name its shard".into(), None))?;
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let _ = tx.send(first).await;
        tokio::spawn(async move {
            while let Ok(Some(m)) = inbound.message().await {
                if tx.send(m).await.is_err() {
                    return;
                }
            }
        });
        let once = std::sync::Mutex::new(Some(tokio_stream::wrappers::ReceiverStream::new(rx)));
        let upstream = self.0.keep_alive_stream(&key, || once.lock().expect("stream lock").take()).await?;
        Ok(Response::new(Box::pin(upstream)))
    }

    async fn close_session(&self, r: Request<pb::CloseSessionRequest>) -> Result<Response<pb::CloseSessionResponse>, Status> {
        let r = r.into_inner();
        let key = shard_of(&r.shard).map_err(|_| status(ErrorCode::InvalidArgument, "through a gateway, CloseSession must name its shard".into(), None))?;
        self.0.close_session(&key, r.session_id).await.map(Response::new)
    }

    async fn acquire(&self, r: Request<pb::AcquireRequest>) -> Result<Response<pb::AcquireResponse>, Status> {
        self.0.acquire(r.into_inner()).await.map(Response::new)
    }

    async fn release(&self, r: Request<pb::ReleaseRequest>) -> Result<Response<pb::ReleaseResponse>, Status> {
        self.0.release(r.into_inner()).await.map(Response::new)
    }

    async fn describe(&self, r: Request<pb::DescribeRequest>) -> Result<Response<pb::DescribeResponse>, Status> {
        self.0.describe(r.into_inner()).await.map(Response::new)
    }

    async fn list(&self, r: Request<pb::ListRequest>) -> Result<Response<pb::ListResponse>, Status> {
        self.0.list(r.into_inner()).await.map(Response::new)
    }

    async fn list_sessions(&self, r: Request<pb::ListSessionsRequest>) -> Result<Response<pb::ListSessionsResponse>, Status> {
        self.0.list_sessions(r.into_inner()).await.map(Response::new)
    }

    type WatchStream = BoxStream<pb::WatchResponse>;

    async fn watch(&self, r: Request<pb::WatchRequest>) -> Result<Response<Self::WatchStream>, Status> {
        let s = self.0.watch(r.into_inner()).await?;
        Ok(Response::new(Box::pin(s)))
    }

    async fn check_token(&self, r: Request<pb::CheckTokenRequest>) -> Result<Response<pb::CheckTokenResponse>, Status> {
        self.0.check_token(r.into_inner()).await.map(Response::new)
    }

    async fn break_lock(&self, r: Request<pb::BreakLockRequest>) -> Result<Response<pb::BreakLockResponse>, Status> {
        let identity = r.metadata().get("holdfast-identity").and_then(|v| v.to_str().ok()).map(str::to_owned);
        let identity = identity.or_else(|| r.remote_addr().map(|a| format!("anonymous@{a} via gateway")));
        self.0.break_lock(r.into_inner(), identity).await.map(Response::new)
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
                    let req = r.into_inner();
                    self.0
                        .registry(|mut c| {
                            let req = req.clone();
                            async move { c.$name(req).await }
                        })
                        .await
                        .map(Response::new)
                }
            )*

            type WatchOwnershipStream = BoxStream<rpb::OwnershipEvent>;

            async fn watch_ownership(&self, r: Request<rpb::WatchOwnershipRequest>) -> Result<Response<Self::WatchOwnershipStream>, Status> {
                let req = r.into_inner();
                let s = self
                    .0
                    .registry(|mut c| {
                        let req = req.clone();
                        async move { c.watch_ownership(req).await }
                    })
                    .await?;
                Ok(Response::new(Box::pin(s)))
            }

            async fn renew_ownership(&self, _: Request<rpb::RenewOwnershipRequest>) -> Result<Response<rpb::RenewOwnershipResponse>, Status> {
                Err(status(ErrorCode::PermissionDenied, "RenewOwnership is for cells, which call the registry directly".into(), None))
            }

            async fn report_sealed(&self, _: Request<rpb::ReportSealedRequest>) -> Result<Response<rpb::ReportSealedResponse>, Status> {
                Err(status(ErrorCode::PermissionDenied, "ReportSealed is for cells, which call the registry directly".into(), None))
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
