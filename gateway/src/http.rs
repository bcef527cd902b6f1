//! The HTTP/JSON front (axum on hyper), documented in `docs/api.md`. Every handler
//! builds the protobuf request and goes through [`Gateway`], so both fronts share one
//! path; answers are the typed shapes of `holdfast_proto::json`, which the command
//! line's `-o json` prints too. Errors are [`ErrorBody`] with the status of
//! `ErrorCode::http_status`, malformed bodies included.

use crate::access::Need;
use crate::gateway::Gateway;
use axum::extract::rejection::JsonRejection;
use axum::extract::{ConnectInfo, FromRequest, Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use holdfast_core::{ErrorCode, Mode, Role, ShardKey};
use holdfast_proto::convert::{mode_to, shard_key};
use holdfast_proto::json::{CheckView, ErrorBody, GrantView, LockView, NamespaceSpec, NamespaceView, OwnerView};
use holdfast_proto::lock::v1 as pb;
use holdfast_proto::registry::v1 as rpb;
use holdfast_rpc::status::{code_of, retry_after_of, status};
use holdfast_rpc::{CallContext, Peer};
use serde::{Deserialize, Serialize};
use tonic::Status;

/// A failed call as JSON.
#[derive(Debug)]
pub struct ApiError(Status);

impl From<Status> for ApiError {
    fn from(s: Status) -> ApiError {
        ApiError(s)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = code_of(&self.0).unwrap_or(ErrorCode::Unavailable);
        let http = StatusCode::from_u16(code.http_status()).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
        let retry_after_ms = retry_after_of(&self.0);
        let body = ErrorBody { code, message: self.0.message().to_owned(), retryable: code.is_retryable(), retry_after_ms };
        let mut resp = (http, Json(body)).into_response();
        if let Some(ms) = retry_after_ms.filter(|ms| *ms > 0) {
            // Retry-After counts whole seconds: rounded up, never 0 for a real wait.
            resp.headers_mut().insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from(ms.div_ceil(1000)));
        }
        // For the front door's count (`door.rs`).
        resp.extensions_mut().insert(code);
        resp
    }
}

type ApiResult<T> = Result<Json<T>, ApiError>;

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError(status(ErrorCode::InvalidArgument, msg.into()))
}

/// A JSON body whose every rejection (not JSON, wrong content type, a missing or
/// unknown field) is an `INVALID_ARGUMENT` in the API's error shape.
#[derive(Debug)]
struct Body<T>(T);

impl<S, T> FromRequest<S> for Body<T>
where
    Json<T>: FromRequest<S, Rejection = JsonRejection>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(Body(v)),
            Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                Err(bad(format!("request body larger than {} bytes", holdfast_rpc::serve::MAX_HTTP_BODY_BYTES)))
            }
            Err(e) => Err(bad(format!("bad request body: {}", e.body_text()))),
        }
    }
}

/// The call's context: the connection and the headers it came with.
fn context(peer: ConnectInfo<Peer>, headers: &HeaderMap) -> CallContext {
    CallContext::from_http(Some(peer.0), headers)
}

fn key(ns: String, shard: String) -> Result<ShardKey, ApiError> {
    shard_key(ns, shard).map_err(|e| bad(e.to_string()))
}

fn shard_ref(k: &ShardKey) -> Option<pb::ShardRef> {
    Some(pb::ShardRef::from(k))
}

/// HTTP session ids name their shard: `ns:shard:hex`. (`:` is not allowed in names.)
fn session_handle(k: &ShardKey, id: u64) -> String {
    format!("{}:{}:{id:016x}", k.ns, k.shard)
}

fn parse_session(handle: &str) -> Result<(ShardKey, u64), ApiError> {
    let mut parts = handle.splitn(3, ':');
    let (Some(ns), Some(shard), Some(hex)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(bad(format!("session {handle:?} is not ns:shard:id as POST /v1/sessions returned it")));
    };
    let id = u64::from_str_radix(hex, 16).map_err(|_| bad(format!("session {handle:?}: {hex:?} is not a hex id")))?;
    Ok((key(ns.into(), shard.into())?, id))
}

fn parse_token(s: &str) -> Result<u64, ApiError> {
    s.parse().map_err(|_| bad(format!("token {s:?} is not a decimal integer")))
}

pub fn router(gw: Gateway) -> Router {
    Router::new()
        .route("/v1/namespaces", post(create_namespace))
        .route("/v1/namespaces/{ns}", get(get_namespace))
        .route("/v1/sessions", post(create_session))
        .route("/v1/sessions/{id}/keepalive", post(keep_alive))
        .route("/v1/sessions/{id}", axum::routing::delete(close_session))
        .route("/v1/locks/{ns}/{shard}/{name}", get(describe))
        .route("/v1/locks/{ns}/{shard}/{name}/acquire", post(acquire))
        .route("/v1/locks/{ns}/{shard}/{name}/release", post(release))
        .route("/v1/locks/{ns}/{shard}/{name}/check", post(check))
        .route("/v1/shards/{ns}/{shard}/owner", get(owner))
        .route("/v1/shards/{ns}/{shard}/move", post(move_shard))
        .route("/v1/admin/locks/{ns}/{shard}/{name}/break", post(break_lock))
        .layer(axum::middleware::from_fn(crate::door::http_layer))
        .with_state(gw)
}

fn namespace_view(c: Option<&holdfast_proto::admin::v1::NamespaceConfig>) -> Result<NamespaceView, ApiError> {
    let c = c.ok_or_else(|| ApiError(status(ErrorCode::Unavailable, "the registry answered without a config")))?;
    NamespaceView::try_from(c).map_err(|e| ApiError(status(ErrorCode::Unavailable, format!("the registry sent a config this gateway cannot read: {e}"))))
}

async fn create_namespace(State(gw): State<Gateway>, peer: ConnectInfo<Peer>, headers: HeaderMap, Body(spec): Body<NamespaceSpec>) -> ApiResult<NamespaceView> {
    let ctx = context(peer, &headers);
    let req = rpb::CreateNamespaceRequest { config: Some(spec.to_pb()) };
    let r = gw.registry(&ctx, Need::Operator, req, |mut c, r| async move { c.create_namespace(r).await }).await?;
    Ok(Json(namespace_view(r.config.as_ref())?))
}

async fn get_namespace(State(gw): State<Gateway>, peer: ConnectInfo<Peer>, headers: HeaderMap, Path(ns): Path<String>) -> ApiResult<NamespaceView> {
    let ctx = context(peer, &headers);
    let need = Need::ns(Role::Reader, &ns)?;
    let r = gw.registry(&ctx, need, rpb::GetNamespaceRequest { name: ns }, |mut c, r| async move { c.get_namespace(r).await }).await?;
    Ok(Json(namespace_view(r.config.as_ref())?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SessionBody {
    ns: String,
    #[serde(default = "default_shard")]
    shard: String,
    ttl_ms: u64,
    #[serde(default)]
    label: String,
}

fn default_shard() -> String {
    "default".into()
}

/// A session as HTTP names it.
#[derive(Debug, Serialize)]
struct SessionAnswer {
    session: String,
    ttl_remaining_ms: u64,
}

#[derive(Debug, Serialize)]
struct Empty {}

async fn create_session(State(gw): State<Gateway>, peer: ConnectInfo<Peer>, headers: HeaderMap, Body(b): Body<SessionBody>) -> ApiResult<SessionAnswer> {
    let ctx = context(peer, &headers);
    let k = key(b.ns, b.shard)?;
    let r = gw.create_session(&ctx, pb::CreateSessionRequest { shard: shard_ref(&k), ttl_ms: b.ttl_ms, client_label: b.label }).await?;
    Ok(Json(SessionAnswer { session: session_handle(&k, r.session_id), ttl_remaining_ms: r.ttl_remaining_ms }))
}

async fn keep_alive(State(gw): State<Gateway>, peer: ConnectInfo<Peer>, headers: HeaderMap, Path(id): Path<String>) -> ApiResult<SessionAnswer> {
    let ctx = context(peer, &headers);
    let (k, sid) = parse_session(&id)?;
    let r = gw.keep_alive_once(&ctx, &k, sid).await?;
    Ok(Json(SessionAnswer { session: id, ttl_remaining_ms: r.ttl_remaining_ms }))
}

async fn close_session(State(gw): State<Gateway>, peer: ConnectInfo<Peer>, headers: HeaderMap, Path(id): Path<String>) -> ApiResult<Empty> {
    let ctx = context(peer, &headers);
    let (k, sid) = parse_session(&id)?;
    gw.close_session(&ctx, pb::CloseSessionRequest { session_id: sid, shard: shard_ref(&k) }).await?;
    Ok(Json(Empty {}))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AcquireBody {
    session: String,
    request_id: String,
    /// `exclusive` (default) or `shared`.
    #[serde(default)]
    mode: Option<Mode>,
    #[serde(default)]
    wait_timeout_ms: u64,
    /// The holder's payload, UTF-8 (at most the namespace's max value size).
    #[serde(default)]
    value: String,
}

async fn acquire(
    State(gw): State<Gateway>,
    peer: ConnectInfo<Peer>,
    headers: HeaderMap,
    Path((ns, shard, name)): Path<(String, String, String)>,
    Body(b): Body<AcquireBody>,
) -> ApiResult<GrantView> {
    let ctx = context(peer, &headers);
    let k = key(ns, shard)?;
    let (sk, sid) = parse_session(&b.session)?;
    if sk != k {
        return Err(bad(format!("session {} lives in shard {sk}, not {k}", b.session)));
    }
    let req = pb::AcquireRequest {
        shard: shard_ref(&k),
        name,
        session_id: sid,
        mode: mode_to(b.mode.unwrap_or(Mode::Exclusive)),
        wait_timeout_ms: b.wait_timeout_ms,
        request_id: b.request_id,
        value: b.value.into_bytes(),
    };
    let r = gw.acquire(&ctx, req).await?;
    Ok(Json(GrantView::from(&r)))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenBody {
    token: String,
}

async fn release(
    State(gw): State<Gateway>,
    peer: ConnectInfo<Peer>,
    headers: HeaderMap,
    Path((ns, shard, name)): Path<(String, String, String)>,
    Body(b): Body<TokenBody>,
) -> ApiResult<Empty> {
    let ctx = context(peer, &headers);
    let k = key(ns, shard)?;
    gw.release(&ctx, pb::ReleaseRequest { shard: shard_ref(&k), name, token: parse_token(&b.token)? }).await?;
    Ok(Json(Empty {}))
}

async fn check(
    State(gw): State<Gateway>,
    peer: ConnectInfo<Peer>,
    headers: HeaderMap,
    Path((ns, shard, name)): Path<(String, String, String)>,
    Body(b): Body<TokenBody>,
) -> ApiResult<CheckView> {
    let ctx = context(peer, &headers);
    let k = key(ns, shard)?;
    let r = gw.check_token(&ctx, pb::CheckTokenRequest { shard: shard_ref(&k), name, token: parse_token(&b.token)? }).await?;
    Ok(Json(CheckView::from(&r)))
}

async fn describe(
    State(gw): State<Gateway>,
    peer: ConnectInfo<Peer>,
    headers: HeaderMap,
    Path((ns, shard, name)): Path<(String, String, String)>,
) -> ApiResult<LockView> {
    let ctx = context(peer, &headers);
    let k = key(ns, shard)?;
    let d = gw.describe(&ctx, pb::DescribeRequest { shard: shard_ref(&k), name }).await?;
    Ok(Json(LockView::from_pb(&d, |id| session_handle(&k, id))))
}

fn owner_view(o: Option<&rpb::ShardOwner>) -> Result<OwnerView, ApiError> {
    o.map(OwnerView::from).ok_or_else(|| ApiError(status(ErrorCode::Unavailable, "the registry answered without an owner")))
}

async fn owner(State(gw): State<Gateway>, peer: ConnectInfo<Peer>, headers: HeaderMap, Path((ns, shard)): Path<(String, String)>) -> ApiResult<OwnerView> {
    let ctx = context(peer, &headers);
    let k = key(ns, shard)?;
    let r = gw.get_owner(&ctx, &k).await?;
    Ok(Json(owner_view(r.owner.as_ref())?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MoveBody {
    to_cell: String,
    #[serde(default = "yes")]
    planned: bool,
}

fn yes() -> bool {
    true
}

async fn move_shard(
    State(gw): State<Gateway>,
    peer: ConnectInfo<Peer>,
    headers: HeaderMap,
    Path((ns, shard)): Path<(String, String)>,
    Body(b): Body<MoveBody>,
) -> ApiResult<OwnerView> {
    let ctx = context(peer, &headers);
    let k = key(ns, shard)?;
    let req = rpb::MoveShardRequest { ns: k.ns.to_string(), shard: k.shard.to_string(), to_cell: b.to_cell, planned: b.planned };
    let r = gw.registry(&ctx, Need::Operator, req, |mut c, r| async move { c.move_shard(r).await }).await?;
    Ok(Json(owner_view(r.owner.as_ref())?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BreakBody {
    reason: String,
}

#[derive(Debug, Serialize)]
struct BreakAnswer {
    new_floor: String,
}

async fn break_lock(
    State(gw): State<Gateway>,
    peer: ConnectInfo<Peer>,
    headers: HeaderMap,
    Path((ns, shard, name)): Path<(String, String, String)>,
    Body(b): Body<BreakBody>,
) -> ApiResult<BreakAnswer> {
    let ctx = context(peer, &headers);
    let k = key(ns, shard)?;
    if b.reason.trim().is_empty() {
        return Err(bad("a break needs a reason: it goes to the audit record"));
    }
    let r = gw.break_lock(&ctx, pb::BreakLockRequest { shard: shard_ref(&k), name, reason: b.reason }).await?;
    Ok(Json(BreakAnswer { new_floor: r.new_floor.to_string() }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::header::RETRY_AFTER;
    use std::time::Duration;

    async fn answer(s: Status) -> (u16, Option<String>, serde_json::Value) {
        let resp = ApiError(s).into_response();
        let status = resp.status().as_u16();
        let after = resp.headers().get(RETRY_AFTER).map(|v| v.to_str().unwrap().to_owned());
        let body = axum::body::to_bytes(resp.into_body(), 1 << 16).await.unwrap();
        (status, after, serde_json::from_slice(&body).unwrap())
    }

    #[tokio::test]
    async fn errors_say_whether_and_when_to_retry() {
        // A rate limit knows when the next token comes: 1.2 s is a Retry-After of 2.
        let limited = holdfast_rpc::status::with_retry_after(status(ErrorCode::RateLimited, "slow down"), Duration::from_millis(1200));
        let (code, after, body) = answer(limited).await;
        assert_eq!((code, after.as_deref()), (429, Some("2")));
        assert_eq!(body, serde_json::json!({ "code": "RATE_LIMITED", "message": "slow down", "retryable": true, "retry_after_ms": 1200 }));
        // Retryable without a hint: the code's default.
        let (code, after, body) = answer(status(ErrorCode::Moving, "moving")).await;
        assert_eq!((code, after.as_deref(), &body["retry_after_ms"]), (503, Some("1"), &serde_json::json!(500)));
        // Final: no retry, no header, no delay.
        let (code, after, body) = answer(status(ErrorCode::NotHolder, "gone")).await;
        assert_eq!((code, after), (409, None));
        assert_eq!(body, serde_json::json!({ "code": "NOT_HOLDER", "message": "gone", "retryable": false }));
    }
}
