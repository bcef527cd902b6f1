//! What the gateway does with each call, once, for both fronts (gRPC in `grpc.rs`,
//! HTTP/JSON in `http.rs`): validate the shard, apply the namespace's rate limit,
//! route to the shard's cell, and apply the namespace's posture when the cell cannot
//! be reached.

use crate::limits::Limits;
use crate::placement::Placement;
use crate::route::on_shard;
use holdfast_client::upstream::{CallError, CALL_TIMEOUT};
use holdfast_core::metric_names as m;
use holdfast_core::{ErrorCode, Posture, ShardKey};
use holdfast_proto::convert::shard_key;
use holdfast_proto::lock::v1 as pb;
use holdfast_proto::lock::v1::lock_service_client::LockServiceClient;
use holdfast_proto::registry::v1 as rpb;
use holdfast_proto::registry::v1::registry_service_client::RegistryServiceClient;
use holdfast_proto::status::status;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::transport::Channel;
use tonic::{Status, Streaming};
use tracing::warn;

/// Extra time a queued acquire's call gets beyond its wait, for the grant to travel.
const WAIT_GRACE: Duration = Duration::from_secs(2);

/// The gateway's shared state: placement and limits. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Gateway {
    pub placement: Arc<Placement>,
    limits: Arc<Limits>,
}

fn invalid(msg: String) -> Status {
    status(ErrorCode::InvalidArgument, msg, None)
}

/// The shard a request names, validated.
pub fn shard_of(r: &Option<pb::ShardRef>) -> Result<ShardKey, Status> {
    let r = r.as_ref().ok_or_else(|| invalid("shard is required".into()))?;
    shard_key(r.ns.clone(), r.shard.clone()).map_err(|e| invalid(e.to_string()))
}

/// The request's shard reference with the epoch this gateway believes in.
fn with_epoch(key: &ShardKey, epoch: u32) -> Option<pb::ShardRef> {
    Some(pb::ShardRef { ns: key.ns.to_string(), shard: key.shard.to_string(), epoch })
}

impl Gateway {
    pub fn new(placement: Arc<Placement>) -> Gateway {
        Gateway { placement, limits: Arc::new(Limits::default()) }
    }

    async fn known_namespace(&self, key: &ShardKey) -> Result<holdfast_core::NamespaceConfig, Status> {
        self.placement
            .namespace_or_refresh(&key.ns)
            .await
            .ok_or_else(|| status(ErrorCode::UnknownNamespace, format!("namespace {} is not known to the registry", key.ns), None))
    }

    /// One unary LockService call for the shard its request names, carrying the epoch
    /// this gateway believes in: the shared body of release, describe, list,
    /// list_sessions and check_token.
    async fn unary<Req, Resp, F, Fut>(&self, req: Req, shard: impl Fn(&mut Req) -> &mut Option<pb::ShardRef>, call: F) -> Result<Resp, Status>
    where
        Req: Clone,
        F: Fn(LockServiceClient<Channel>, Req) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<Resp>, Status>>,
    {
        let mut probe = req.clone();
        let key = shard_of(shard(&mut probe))?;
        on_shard(&self.placement, &key, CALL_TIMEOUT, |ch, o| {
            let mut req = req.clone();
            *shard(&mut req) = with_epoch(&key, o.epoch);
            call(LockServiceClient::new(ch), req)
        })
        .await
        .map_err(CallError::into_status)
    }

    pub async fn create_session(&self, req: pb::CreateSessionRequest) -> Result<pb::CreateSessionResponse, Status> {
        let key = shard_of(&req.shard)?;
        self.known_namespace(&key).await?;
        on_shard(&self.placement, &key, CALL_TIMEOUT, |ch, o| {
            let mut req = req.clone();
            req.shard = with_epoch(&key, o.epoch);
            async move { LockServiceClient::new(ch).create_session(req).await }
        })
        .await
        .map_err(CallError::into_status)
    }

    /// One renewal, for the HTTP front (gRPC forwards whole streams).
    pub async fn keep_alive_once(&self, key: &ShardKey, session_id: u64) -> Result<pb::KeepAliveResponse, Status> {
        let first = pb::KeepAliveRequest { session_id, shard: Some(pb::ShardRef { ns: key.ns.to_string(), shard: key.shard.to_string(), epoch: 0 }) };
        let mut stream = self.keep_alive_stream(key, || Some(tokio_stream::iter(vec![first.clone()]))).await?;
        stream.message().await?.ok_or_else(|| status(ErrorCode::Unavailable, "the cell ended the renewal stream".into(), None))
    }

    /// Opens a KeepAlive stream at the shard's cell, fed by what `requests` makes for
    /// each attempt. A live client stream can be handed over only once: its factory
    /// returns `None` the second time, and the caller hears `UNAVAILABLE` (retry).
    pub async fn keep_alive_stream<S>(&self, key: &ShardKey, requests: impl Fn() -> Option<S>) -> Result<Streaming<pb::KeepAliveResponse>, Status>
    where
        S: tokio_stream::Stream<Item = pb::KeepAliveRequest> + Send + 'static,
    {
        on_shard(&self.placement, key, CALL_TIMEOUT, |ch, _| {
            let reqs = requests();
            async move {
                match reqs {
                    Some(r) => LockServiceClient::new(ch).keep_alive(r).await,
                    None => Err(status(ErrorCode::Unavailable, "the renewal stream went to a node that was not the leader; renew again".into(), None)),
                }
            }
        })
        .await
        .map_err(CallError::into_status)
    }

    pub async fn close_session(&self, key: &ShardKey, session_id: u64) -> Result<pb::CloseSessionResponse, Status> {
        on_shard(&self.placement, key, CALL_TIMEOUT, |ch, _| async move {
            let shard = Some(pb::ShardRef { ns: key.ns.to_string(), shard: key.shard.to_string(), epoch: 0 });
            LockServiceClient::new(ch).close_session(pb::CloseSessionRequest { session_id, shard }).await
        })
        .await
        .map_err(CallError::into_status)
    }

    /// Acquire: rate limit, `MOVING` while the shard drains, route, and the posture
    /// when the cell cannot be reached.
    pub async fn acquire(&self, req: pb::AcquireRequest) -> Result<pb::AcquireResponse, Status> {
        let key = shard_of(&req.shard)?;
        let config = self.known_namespace(&key).await?;
        if !self.limits.admit(&key.ns, config.quotas.acquires_per_second, Instant::now()) {
            metrics::counter!(m::GATEWAY_RATE_LIMITED, "ns" => key.ns.to_string()).increment(1);
            return Err(status(
                ErrorCode::RateLimited,
                format!("namespace {} is at its limit of {} acquires/s; retry with backoff", key.ns, config.quotas.acquires_per_second),
                None,
            ));
        }
        if self.placement.owner(&key).is_some_and(|o| o.draining) {
            return Err(status(ErrorCode::Moving, format!("shard {key} is moving to another cell; retry shortly"), None));
        }
        let budget = Duration::from_millis(req.wait_timeout_ms) + WAIT_GRACE;
        let routed = on_shard(&self.placement, &key, budget.max(CALL_TIMEOUT), |ch, o| {
            let mut req = req.clone();
            req.shard = with_epoch(&key, o.epoch);
            async move { LockServiceClient::new(ch).acquire(req).await }
        })
        .await;
        match routed {
            Ok(r) => Ok(r),
            Err(CallError::Unreachable(why)) if config.posture == Posture::FailOpen => {
                metrics::counter!(m::GATEWAY_UNFENCED_GRANTS, "ns" => key.ns.to_string()).increment(1);
                warn!(shard = %key, why = %why, "cell unreachable: fail-open namespace gets an UNFENCED grant");
                Ok(pb::AcquireResponse { token: 0, ttl_remaining_ms: 0, epoch: 0, unfenced: true })
            }
            Err(CallError::Unreachable(why)) => {
                Err(status(ErrorCode::Unavailable, format!("the cell serving {key} cannot be reached ({why}); namespace {} is fail-closed", key.ns), None))
            }
            Err(CallError::Answered(s)) => Err(s),
        }
    }

    pub async fn release(&self, req: pb::ReleaseRequest) -> Result<pb::ReleaseResponse, Status> {
        self.unary(req, |r| &mut r.shard, |mut c, r| async move { c.release(r).await }).await
    }

    pub async fn describe(&self, req: pb::DescribeRequest) -> Result<pb::DescribeResponse, Status> {
        self.unary(req, |r| &mut r.shard, |mut c, r| async move { c.describe(r).await }).await
    }

    pub async fn list(&self, req: pb::ListRequest) -> Result<pb::ListResponse, Status> {
        self.unary(req, |r| &mut r.shard, |mut c, r| async move { c.list(r).await }).await
    }

    pub async fn list_sessions(&self, req: pb::ListSessionsRequest) -> Result<pb::ListSessionsResponse, Status> {
        self.unary(req, |r| &mut r.shard, |mut c, r| async move { c.list_sessions(r).await }).await
    }

    pub async fn check_token(&self, req: pb::CheckTokenRequest) -> Result<pb::CheckTokenResponse, Status> {
        self.unary(req, |r| &mut r.shard, |mut c, r| async move { c.check_token(r).await }).await
    }

    /// BreakLock, with the caller's identity passed on for the audit record.
    pub async fn break_lock(&self, req: pb::BreakLockRequest, identity: Option<String>) -> Result<pb::BreakLockResponse, Status> {
        let key = shard_of(&req.shard)?;
        on_shard(&self.placement, &key, CALL_TIMEOUT, |ch, o| {
            let mut req = req.clone();
            req.shard = with_epoch(&key, o.epoch);
            let mut call = tonic::Request::new(req);
            if let Some(id) = identity.as_deref().and_then(|i| i.parse().ok()) {
                call.metadata_mut().insert("holdfast-identity", id);
            }
            async move { LockServiceClient::new(ch).break_lock(call).await }
        })
        .await
        .map_err(CallError::into_status)
    }

    pub async fn watch(&self, req: pb::WatchRequest) -> Result<Streaming<pb::WatchResponse>, Status> {
        let key = shard_of(&req.shard)?;
        on_shard(&self.placement, &key, CALL_TIMEOUT, |ch, o| {
            let mut req = req.clone();
            req.shard = with_epoch(&key, o.epoch);
            async move { LockServiceClient::new(ch).watch(req).await }
        })
        .await
        .map_err(CallError::into_status)
    }

    /// Calls the registry (any member, following its leader).
    pub async fn registry<T, F, Fut>(&self, f: F) -> Result<T, Status>
    where
        F: Fn(RegistryServiceClient<Channel>) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<T>, Status>>,
    {
        self.placement.registry().call(CALL_TIMEOUT, |ch| f(RegistryServiceClient::new(ch))).await.map_err(CallError::into_status)
    }

    pub async fn get_owner(&self, key: &ShardKey) -> Result<rpb::GetOwnerResponse, Status> {
        let req = rpb::GetOwnerRequest { ns: key.ns.to_string(), shard: key.shard.to_string() };
        self.registry(|mut c| {
            let req = req.clone();
            async move { c.get_owner(req).await }
        })
        .await
    }
}
