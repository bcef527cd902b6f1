//! What the gateway does with each call, once, for both fronts (gRPC in `grpc.rs`,
//! HTTP/JSON in `http.rs`): check the caller's role (`access.rs`; every method
//! states what it needs), validate the shard, apply the namespace's rate limit,
//! route to the shard's cell, and apply the namespace's posture when the cell cannot
//! be reached. Every method takes the call's [`CallContext`] — who calls, until when,
//! in which trace — and passes it on to the cell or the registry.

use crate::access::{Access, Need};
use crate::limits::Limits;
use crate::placement::Placement;
use crate::route::{at_owner, on_shard};
use holdfast_core::metric_names as m;
use holdfast_core::{ErrorCode, NamespaceConfig, Posture, Role, ShardKey};
use holdfast_proto::convert::shard_key;
use holdfast_proto::lock::v1 as pb;
use holdfast_proto::lock::v1::lock_service_client::LockServiceClient;
use holdfast_proto::registry::v1 as rpb;
use holdfast_proto::registry::v1::registry_service_client::RegistryServiceClient;
use holdfast_rpc::status::status;
use holdfast_rpc::{Budget, CallContext, CallError, Channel, Tasks};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};
use tracing::{warn, Instrument};

/// Extra time a queued acquire's call gets beyond its wait, for the grant to travel.
const WAIT_GRACE: Duration = Duration::from_secs(2);
/// The least time one member gets to answer a renewal, however short the caller's
/// deadline (see `keep_alive`).
const MIN_RENEWAL_ATTEMPT: Duration = Duration::from_millis(200);
/// The most HTTP event streams (Server-Sent Events) one gateway serves at once: each
/// holds a watch on the registry or a cell.
pub const MAX_EVENT_STREAMS: usize = 1024;

/// The gateway's shared state: placement, limits, and the tasks that forward renewal
/// streams. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Gateway {
    pub placement: Arc<Placement>,
    access: Arc<Access>,
    limits: Arc<Limits>,
    tasks: Tasks,
    /// Default bound of one upstream attempt.
    timeout: Duration,
    /// Places for HTTP event streams ([`MAX_EVENT_STREAMS`]).
    streams: Arc<tokio::sync::Semaphore>,
}

fn invalid(msg: String) -> Status {
    status(ErrorCode::InvalidArgument, msg)
}

/// The shard a request names, validated.
pub fn shard_of(r: &Option<pb::ShardRef>) -> Result<ShardKey, Status> {
    let r = r.as_ref().ok_or_else(|| invalid("shard is required".into()))?;
    shard_key(r.ns.clone(), r.shard.clone()).map_err(|e| invalid(e.to_string()))
}

impl Gateway {
    pub fn new(placement: Arc<Placement>, access: Arc<Access>, tasks: Tasks, timeout: Duration) -> Gateway {
        let streams = Arc::new(tokio::sync::Semaphore::new(MAX_EVENT_STREAMS));
        Gateway { placement, access, limits: Arc::new(Limits::default()), tasks, timeout, streams }
    }

    /// A place for one more HTTP event stream, held while it lasts; `UNAVAILABLE`
    /// while the gateway serves its most.
    pub fn stream_slot(&self) -> Result<tokio::sync::OwnedSemaphorePermit, Status> {
        self.streams.clone().try_acquire_owned().map_err(|_| {
            let busy =
                status(ErrorCode::Unavailable, format!("this gateway serves its most event streams ({MAX_EVENT_STREAMS}); retry, or use another gateway"));
            holdfast_rpc::status::with_retry_after(busy, Duration::from_secs(1))
        })
    }

    /// Fires when the gateway starts stopping: long-lived answers (event streams) end
    /// then, so shutdown does not wait for their callers.
    pub fn stopping(&self) -> tokio_util::sync::WaitForCancellationFutureOwned {
        self.tasks.stop_token().cancelled_owned()
    }

    /// The caller of `ctx` checked for `role` in the namespace of `shard`: the context
    /// to go on with, which names the caller.
    fn authorize(&self, ctx: &CallContext, role: Role, shard: &Option<pb::ShardRef>) -> Result<CallContext, Status> {
        let key = shard_of(shard)?;
        self.access.authorize(ctx, &Need::In(role, key.ns))
    }

    fn budget(&self, ctx: &CallContext) -> Budget {
        Budget::per_attempt(ctx.budget(self.timeout))
    }

    async fn known_namespace(&self, key: &ShardKey) -> Result<NamespaceConfig, Status> {
        self.placement
            .namespace_or_refresh(&key.ns)
            .await
            .ok_or_else(|| status(ErrorCode::UnknownNamespace, format!("namespace {} is not known to the registry", key.ns)))
    }

    /// One LockService call for the shard its request names, carrying the epoch this
    /// gateway believes in: the shared body of every shard-addressed call.
    async fn on_shard<Req, Resp, F, Fut>(
        &self,
        ctx: &CallContext,
        budget: Budget,
        req: Req,
        shard: impl Fn(&mut Req) -> &mut Option<pb::ShardRef>,
        call: F,
    ) -> Result<Resp, CallError>
    where
        Req: Clone,
        F: Fn(LockServiceClient<Channel>, tonic::Request<Req>) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<Resp>, Status>>,
    {
        let mut probe = req.clone();
        let key = shard_of(shard(&mut probe)).map_err(|s| CallError::Refused { code: ErrorCode::InvalidArgument, status: s })?;
        on_shard(&self.placement, &key, budget, |ch, o| {
            let mut req = req.clone();
            *shard(&mut req) = Some(pb::ShardRef::from(&key).at(o.epoch));
            call(LockServiceClient::new(ch), ctx.request(req))
        })
        .await
    }

    /// [`Gateway::on_shard`] with the default budget, its failure as a status.
    async fn unary<Req, Resp, F, Fut>(
        &self,
        ctx: &CallContext,
        req: Req,
        shard: impl Fn(&mut Req) -> &mut Option<pb::ShardRef>,
        call: F,
    ) -> Result<Resp, Status>
    where
        Req: Clone,
        F: Fn(LockServiceClient<Channel>, tonic::Request<Req>) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<Resp>, Status>>,
    {
        self.on_shard(ctx, self.budget(ctx), req, shard, call).await.map_err(CallError::into_status)
    }

    pub async fn create_session(&self, ctx: &CallContext, req: pb::CreateSessionRequest) -> Result<pb::CreateSessionResponse, Status> {
        let ctx = &self.authorize(ctx, Role::Holder, &req.shard)?;
        self.known_namespace(&shard_of(&req.shard)?).await?;
        self.unary(ctx, req, |r| &mut r.shard, |mut c, r| async move { c.create_session(r).await }).await
    }

    /// Opens a KeepAlive stream at the shard's cell: `first` (which names the shard)
    /// is sent on every attempt, since the cell answers it before it accepts the stream
    /// (a follower's `NOT_LEADER` is followed like any other call's); once a leader
    /// accepted, the rest of the client's stream, if any, is forwarded to it.
    pub async fn keep_alive(
        &self,
        ctx: &CallContext,
        first: pb::KeepAliveRequest,
        rest: Option<Streaming<pb::KeepAliveRequest>>,
    ) -> Result<Streaming<pb::KeepAliveResponse>, Status> {
        let key =
            shard_of(&first.shard).map_err(|_| status(ErrorCode::InvalidArgument, "through a gateway, the first KeepAlive message must name its shard"))?;
        let ctx = &self.access.authorize(ctx, &Need::In(Role::Holder, key.ns.clone()))?;
        // The sender of the attempt that got through: the rest is forwarded into it.
        let accepted: Mutex<Option<mpsc::Sender<pb::KeepAliveRequest>>> = Mutex::new(None);
        // A renewal is answered in milliseconds by a working leader. One that is stuck
        // (SIGSTOPped, partitioned with its socket open) must not eat the caller's whole
        // deadline: each member gets at most half of it, so the pass always reaches
        // another member — the new leader, or a follower's NOT_LEADER that the caller
        // retries at once. (Renewals are idempotent; other calls keep the full budget.)
        let total = ctx.budget(self.timeout);
        let budget = Budget::per_attempt((total / 2).max(MIN_RENEWAL_ATTEMPT).min(total)).until(Instant::now() + total);
        let stream = at_owner(&self.placement, &key, budget, |ch, _| {
            let (tx, rx) = mpsc::channel(16);
            let _ = tx.try_send(first.clone());
            *accepted.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
            let req = ctx.request(ReceiverStream::new(rx));
            async move { LockServiceClient::new(ch).keep_alive(req).await }
        })
        .await
        .map_err(CallError::into_status)?;
        let tx = accepted.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let (Some(mut inbound), Some(tx)) = (rest, tx) {
            self.tasks.spawn("renewal forwarder", async move {
                loop {
                    let m = tokio::select! {
                        m = inbound.message() => m,
                        _ = tx.closed() => return,
                    };
                    let Ok(Some(m)) = m else { return };
                    if tx.send(m).await.is_err() {
                        return;
                    }
                }
            });
        }
        Ok(stream)
    }

    /// One renewal, for the HTTP front.
    pub async fn keep_alive_once(&self, ctx: &CallContext, key: &ShardKey, session_id: u64) -> Result<pb::KeepAliveResponse, Status> {
        let first = pb::KeepAliveRequest { session_id, shard: Some(pb::ShardRef::from(key)), more: vec![] };
        let mut stream = self.keep_alive(ctx, first, None).await?;
        stream.message().await?.ok_or_else(|| status(ErrorCode::Unavailable, "the cell ended the renewal stream"))
    }

    pub async fn close_session(&self, ctx: &CallContext, req: pb::CloseSessionRequest) -> Result<pb::CloseSessionResponse, Status> {
        if req.shard.is_none() {
            return Err(invalid("through a gateway, CloseSession must name its shard".into()));
        }
        let ctx = &self.authorize(ctx, Role::Holder, &req.shard)?;
        self.unary(ctx, req, |r| &mut r.shard, |mut c, r| async move { c.close_session(r).await }).await
    }

    /// Acquire: rate limit, `MOVING` while the shard drains, route, and the posture
    /// when the cell cannot be reached.
    pub async fn acquire(&self, ctx: &CallContext, req: pb::AcquireRequest) -> Result<pb::AcquireResponse, Status> {
        let ctx = &self.authorize(ctx, Role::Holder, &req.shard)?;
        let key = shard_of(&req.shard)?;
        let config = self.known_namespace(&key).await?;
        if let Err(wait) = self.limits.admit(&key.ns, config.quotas.acquires_per_second, Instant::now()) {
            metrics::counter!(m::GATEWAY_RATE_LIMITED, "ns" => key.ns.to_string()).increment(1);
            let refused = status(
                ErrorCode::RateLimited,
                format!("namespace {} is at its limit of {} acquires/s; retry with backoff", key.ns, config.quotas.acquires_per_second),
            );
            return Err(holdfast_rpc::status::with_retry_after(refused, wait));
        }
        if self.placement.owner(&key).is_some_and(|o| o.draining) {
            return Err(status(ErrorCode::Moving, format!("shard {key} is moving to another cell; retry shortly")));
        }
        let wait = Duration::from_millis(req.wait_timeout_ms) + WAIT_GRACE;
        let budget = Budget::per_attempt(ctx.budget(wait.max(self.timeout)));
        let routed = self.on_shard(ctx, budget, req, |r| &mut r.shard, |mut c, r| async move { c.acquire(r).await }).await;
        match routed {
            Ok(r) => Ok(r),
            Err(CallError::Unreachable(why)) if config.posture == Posture::FailOpen => {
                metrics::counter!(m::GATEWAY_UNFENCED_GRANTS, "ns" => key.ns.to_string()).increment(1);
                warn!(shard = %key, why = %why, "cell unreachable: fail-open namespace gets an UNFENCED grant");
                Ok(pb::AcquireResponse { token: 0, ttl_remaining_ms: 0, epoch: 0, unfenced: true })
            }
            Err(CallError::Unreachable(why)) => {
                metrics::counter!(m::GATEWAY_FAIL_CLOSED, "ns" => key.ns.to_string()).increment(1);
                Err(status(ErrorCode::Unavailable, format!("the cell serving {key} cannot be reached ({why}); namespace {} is fail-closed", key.ns)))
            }
            Err(e) => Err(e.into_status()),
        }
    }

    pub async fn release(&self, ctx: &CallContext, req: pb::ReleaseRequest) -> Result<pb::ReleaseResponse, Status> {
        let ctx = &self.authorize(ctx, Role::Holder, &req.shard)?;
        self.unary(ctx, req, |r| &mut r.shard, |mut c, r| async move { c.release(r).await }).await
    }

    pub async fn describe(&self, ctx: &CallContext, req: pb::DescribeRequest) -> Result<pb::DescribeResponse, Status> {
        let ctx = &self.authorize(ctx, Role::Reader, &req.shard)?;
        self.unary(ctx, req, |r| &mut r.shard, |mut c, r| async move { c.describe(r).await }).await
    }

    pub async fn list(&self, ctx: &CallContext, req: pb::ListRequest) -> Result<pb::ListResponse, Status> {
        let ctx = &self.authorize(ctx, Role::Reader, &req.shard)?;
        self.unary(ctx, req, |r| &mut r.shard, |mut c, r| async move { c.list(r).await }).await
    }

    pub async fn list_sessions(&self, ctx: &CallContext, req: pb::ListSessionsRequest) -> Result<pb::ListSessionsResponse, Status> {
        self.list_sessions_as(ctx, req).await.map(|(_, r)| r)
    }

    /// ListSessions, with who the caller proved to be (`None` on an `--insecure`
    /// gateway), so a caller can pick out its own sessions.
    pub async fn list_sessions_as(&self, ctx: &CallContext, req: pb::ListSessionsRequest) -> Result<(Option<String>, pb::ListSessionsResponse), Status> {
        let ctx = &self.authorize(ctx, Role::Reader, &req.shard)?;
        let r = self.unary(ctx, req, |r| &mut r.shard, |mut c, r| async move { c.list_sessions(r).await }).await?;
        Ok((ctx.principal(), r))
    }

    pub async fn check_token(&self, ctx: &CallContext, req: pb::CheckTokenRequest) -> Result<pb::CheckTokenResponse, Status> {
        let ctx = &self.authorize(ctx, Role::Reader, &req.shard)?;
        self.unary(ctx, req, |r| &mut r.shard, |mut c, r| async move { c.check_token(r).await }).await
    }

    /// BreakLock; the caller's identity travels with the context for the audit record.
    pub async fn break_lock(&self, ctx: &CallContext, req: pb::BreakLockRequest) -> Result<pb::BreakLockResponse, Status> {
        let ctx = &self.authorize(ctx, Role::Admin, &req.shard)?;
        self.unary(ctx, req, |r| &mut r.shard, |mut c, r| async move { c.break_lock(r).await }).await
    }

    pub async fn watch(&self, ctx: &CallContext, req: pb::WatchRequest) -> Result<Streaming<pb::WatchResponse>, Status> {
        let ctx = &self.authorize(ctx, Role::Reader, &req.shard)?;
        self.unary(ctx, req, |r| &mut r.shard, |mut c, r| async move { c.watch(r).await }).await
    }

    /// Calls the registry (any member, following its leader) with `req`, for a caller
    /// with what the call `need`s.
    pub async fn registry<Req, T, F, Fut>(&self, ctx: &CallContext, need: Need, req: Req, f: F) -> Result<T, Status>
    where
        Req: Clone,
        F: Fn(RegistryServiceClient<Channel>, tonic::Request<Req>) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let ctx = &self.access.authorize(ctx, &need)?;
        self.placement
            .registry()
            .call(self.budget(ctx), |ch| crate::route::timed("registry", f(RegistryServiceClient::new(ch), ctx.request(req.clone()))))
            .instrument(tracing::info_span!("gateway.registry"))
            .await
            .map(|c| c.value)
            .map_err(|e| e.without_hint().into_status())
    }

    /// Where a shard lives: from the placement cache (as of the revision it has
    /// followed, which the answer carries), or with `fresh`, or when the cache does not
    /// know the shard, from the registry's leader.
    pub async fn get_owner(&self, ctx: &CallContext, req: rpb::GetOwnerRequest) -> Result<rpb::GetOwnerResponse, Status> {
        let key = shard_key(req.ns.clone(), req.shard.clone()).map_err(|e| invalid(e.to_string()))?;
        let need = Need::In(Role::Reader, key.ns.clone());
        if !req.fresh {
            self.access.authorize(ctx, &need)?;
            if let Some((owner, revision)) = self.placement.owner_at(&key) {
                metrics::counter!(m::GATEWAY_OWNER_LOOKUPS, "source" => "cache").increment(1);
                return Ok(rpb::GetOwnerResponse { owner: Some(owner), revision });
            }
        }
        metrics::counter!(m::GATEWAY_OWNER_LOOKUPS, "source" => "registry").increment(1);
        self.registry(ctx, need, req, |mut c, r| async move { c.get_owner(r).await }).await
    }
}
