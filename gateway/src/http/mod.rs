//! The HTTP/JSON front (axum on hyper), documented in `docs/api.md`. Every handler
//! builds the protobuf request and goes through [`Gateway`], so both fronts share one
//! path; answers are the typed shapes of `holdfast_proto::json`, which the command
//! line's `-o json` prints too. Errors are [`ErrorBody`] with the status of
//! `ErrorCode::http_status`, malformed bodies included.

use crate::access::Need;
use crate::gateway::Gateway;
use axum::extract::rejection::JsonRejection;
use axum::extract::{ConnectInfo, FromRequest, FromRequestParts, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use holdfast_core::{ErrorCode, Mode, Role, ShardKey};
use holdfast_proto::convert::{mode_to, shard_key};
use holdfast_proto::json::{CheckView, ErrorBody, GrantView, LockView, NamespaceSpec, NamespaceView, OwnerView};
use holdfast_proto::lock::v1 as pb;
use holdfast_proto::registry::v1 as rpb;
use holdfast_rpc::status::{code_of, retry_after_of, status};
use holdfast_rpc::{CallContext, Peer};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use tonic::Status;
use utoipa::{IntoParams, OpenApi, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

mod events;
mod lists;

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

/// A query string whose every rejection is an `INVALID_ARGUMENT` in the API's error
/// shape, as for [`Body`].
#[derive(Debug)]
struct Params<T>(T);

impl<S, T> FromRequestParts<S> for Params<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, ApiError> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(v)) => Ok(Params(v)),
            Err(e) => Err(bad(format!("bad query string: {}", e.body_text()))),
        }
    }
}

/// Path parameters, rejected (bad percent-encoding, not UTF-8) the same way.
#[derive(Debug)]
struct Segments<T>(T);

impl<S, T> FromRequestParts<S> for Segments<T>
where
    T: serde::de::DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, ApiError> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(v)) => Ok(Segments(v)),
            Err(e) => Err(bad(format!("bad path: {}", e.body_text()))),
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

/// The HTTP API: every route registered together with its OpenAPI operation (one
/// `routes!` entry each), so `/openapi.json` describes exactly what is served.
pub fn router(gw: Gateway) -> Router {
    let (api, doc) = api().split_for_parts();
    let doc = Arc::new(finish(doc));
    api.route("/openapi.json", get(move || std::future::ready(Json(doc.as_ref().clone()))))
        .layer(axum::middleware::from_fn(crate::door::http_layer))
        .with_state(gw)
}

/// The OpenAPI 3.1 document of [`router`]'s API.
pub fn openapi() -> utoipa::openapi::OpenApi {
    finish(api().split_for_parts().1)
}

fn api() -> OpenApiRouter<Gateway> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(create_namespace, lists::list_namespaces))
        .routes(routes!(get_namespace))
        .routes(routes!(create_session, lists::list_sessions))
        .routes(routes!(keep_alive))
        .routes(routes!(close_session))
        .routes(routes!(describe))
        .routes(routes!(events::lock_events))
        .routes(routes!(acquire))
        .routes(routes!(release))
        .routes(routes!(check))
        .routes(routes!(lists::list_shards))
        .routes(routes!(events::ownership_events))
        .routes(routes!(owner))
        .routes(routes!(place_shard))
        .routes(routes!(move_shard))
        .routes(routes!(break_lock))
}

#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "holdfast HTTP API",
        description = "Leased locks with fencing tokens, sessions, and shard ownership, served by every holdfast gateway. The contract, error codes and roles: docs/api.md and docs/security.md of the holdfast repository.",
        license(name = "Apache-2.0", identifier = "Apache-2.0")
    ),
    tags(
        (name = "namespaces", description = "Namespaces and their settings"),
        (name = "sessions", description = "Sessions: leases that holds live on"),
        (name = "locks", description = "Acquire, release, check and watch locks"),
        (name = "shards", description = "Where each shard lives, and its changes"),
        (name = "admin", description = "Operator and admin actions"),
    ),
    components(schemas(ErrorBody))
)]
struct ApiDoc;

/// What every operation shares, added once: the error answer (any non-2xx is an
/// [`ErrorBody`]) and how callers authenticate (a client certificate, or a bearer
/// token).
fn finish(mut doc: utoipa::openapi::OpenApi) -> utoipa::openapi::OpenApi {
    use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityRequirement, SecurityScheme};
    use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
    let error = ResponseBuilder::new()
        .description("An error: its stable code, whether and after how long to retry (docs/api.md)")
        .content("application/json", ContentBuilder::new().schema(Some(Ref::from_schema_name("ErrorBody"))).build())
        .build();
    for item in doc.paths.paths.values_mut() {
        for op in [&mut item.get, &mut item.post, &mut item.delete].into_iter().flatten() {
            op.responses.responses.entry("default".into()).or_insert_with(|| error.clone().into());
        }
    }
    let components = doc.components.get_or_insert_with(Default::default);
    components.add_security_scheme("bearer", SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)));
    components.add_security_scheme("client_certificate", SecurityScheme::MutualTls { description: None, extensions: None });
    doc.security = Some(vec![SecurityRequirement::new("bearer", Vec::<String>::new()), SecurityRequirement::new("client_certificate", Vec::<String>::new())]);
    doc
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct PlaceBody {
    /// The cell that is to serve the shard.
    cell: String,
}

/// Places a shard of a namespace on a cell (operator): how a namespace made over
/// HTTP gets its first shard, or any further one.
#[utoipa::path(post, path = "/v1/shards/{ns}/{shard}/place", tag = "shards", params(ShardPath), request_body = PlaceBody,
    responses((status = 200, description = "The new owner record (epoch 1, active)", body = OwnerView)))]
async fn place_shard(
    State(gw): State<Gateway>,
    peer: ConnectInfo<Peer>,
    headers: HeaderMap,
    Segments((ns, shard)): Segments<(String, String)>,
    Body(b): Body<PlaceBody>,
) -> ApiResult<OwnerView> {
    let ctx = context(peer, &headers);
    let k = key(ns, shard)?;
    let req = rpb::PlaceShardRequest { ns: k.ns.to_string(), shard: k.shard.to_string(), cell: b.cell };
    let r = gw.registry(&ctx, Need::Operator, req, |mut c, r| async move { c.place_shard(r).await }).await?;
    Ok(Json(owner_view(r.owner.as_ref())?))
}

/// The path parameters, for the document (handlers take them as tuples).
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
struct NsPath {
    /// The namespace.
    ns: String,
}

#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
struct ShardPath {
    ns: String,
    /// The shard (`default` for a namespace of one shard).
    shard: String,
}

#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
struct LockPath {
    ns: String,
    shard: String,
    /// The lock's name (may contain `/`, URL-encoded).
    name: String,
}

#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
struct SessionPath {
    /// The session as `POST /v1/sessions` returned it: `ns:shard:hex`.
    id: String,
}

fn namespace_view(c: Option<&holdfast_proto::admin::v1::NamespaceConfig>) -> Result<NamespaceView, ApiError> {
    let c = c.ok_or_else(|| ApiError(status(ErrorCode::Unavailable, "the registry answered without a config")))?;
    NamespaceView::try_from(c).map_err(|e| ApiError(status(ErrorCode::Unavailable, format!("the registry sent a config this gateway cannot read: {e}"))))
}

#[utoipa::path(post, path = "/v1/namespaces", tag = "namespaces", request_body = NamespaceSpec,
    responses((status = 200, description = "The stored config (unset fields took the intent's defaults)", body = NamespaceView)))]
async fn create_namespace(State(gw): State<Gateway>, peer: ConnectInfo<Peer>, headers: HeaderMap, Body(spec): Body<NamespaceSpec>) -> ApiResult<NamespaceView> {
    let ctx = context(peer, &headers);
    let req = rpb::CreateNamespaceRequest { config: Some(spec.to_pb()) };
    let r = gw.registry(&ctx, Need::Operator, req, |mut c, r| async move { c.create_namespace(r).await }).await?;
    Ok(Json(namespace_view(r.config.as_ref())?))
}

#[utoipa::path(get, path = "/v1/namespaces/{ns}", tag = "namespaces", params(NsPath),
    responses((status = 200, description = "The namespace's config", body = NamespaceView)))]
async fn get_namespace(State(gw): State<Gateway>, peer: ConnectInfo<Peer>, headers: HeaderMap, Segments(ns): Segments<String>) -> ApiResult<NamespaceView> {
    let ctx = context(peer, &headers);
    let need = Need::ns(Role::Reader, &ns)?;
    let r = gw.registry(&ctx, need, rpb::GetNamespaceRequest { name: ns }, |mut c, r| async move { c.get_namespace(r).await }).await?;
    Ok(Json(namespace_view(r.config.as_ref())?))
}

#[derive(Debug, Deserialize, ToSchema)]
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
#[derive(Debug, Serialize, ToSchema)]
struct SessionAnswer {
    session: String,
    /// How long the session is confirmed for, counted from when the request was sent:
    /// the TTL, or less when the cell's ownership lease of the shard ends sooner.
    ttl_remaining_ms: u64,
    /// On creation: the TTL granted (the one asked for, within the namespace's bounds).
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl_ms: Option<u64>,
}

#[derive(Debug, Serialize, ToSchema)]
struct Empty {}

#[utoipa::path(post, path = "/v1/sessions", tag = "sessions", request_body = SessionBody,
    responses((status = 200, description = "The new session", body = SessionAnswer)))]
async fn create_session(State(gw): State<Gateway>, peer: ConnectInfo<Peer>, headers: HeaderMap, Body(b): Body<SessionBody>) -> ApiResult<SessionAnswer> {
    let ctx = context(peer, &headers);
    let k = key(b.ns, b.shard)?;
    let r = gw.create_session(&ctx, pb::CreateSessionRequest { shard: shard_ref(&k), ttl_ms: b.ttl_ms, client_label: b.label }).await?;
    Ok(Json(SessionAnswer { session: session_handle(&k, r.session_id), ttl_remaining_ms: r.ttl_remaining_ms, ttl_ms: Some(r.ttl_ms) }))
}

#[utoipa::path(post, path = "/v1/sessions/{id}/keepalive", tag = "sessions", params(SessionPath),
    responses((status = 200, description = "The renewed lease", body = SessionAnswer)))]
async fn keep_alive(State(gw): State<Gateway>, peer: ConnectInfo<Peer>, headers: HeaderMap, Segments(id): Segments<String>) -> ApiResult<SessionAnswer> {
    let ctx = context(peer, &headers);
    let (k, sid) = parse_session(&id)?;
    let r = gw.keep_alive_once(&ctx, &k, sid).await?;
    Ok(Json(SessionAnswer { session: id, ttl_remaining_ms: r.ttl_remaining_ms, ttl_ms: None }))
}

#[utoipa::path(delete, path = "/v1/sessions/{id}", tag = "sessions", params(SessionPath),
    responses((status = 200, description = "Closed; its holds are released", body = Empty)))]
async fn close_session(State(gw): State<Gateway>, peer: ConnectInfo<Peer>, headers: HeaderMap, Segments(id): Segments<String>) -> ApiResult<Empty> {
    let ctx = context(peer, &headers);
    let (k, sid) = parse_session(&id)?;
    gw.close_session(&ctx, pb::CloseSessionRequest { session_id: sid, shard: shard_ref(&k) }).await?;
    Ok(Json(Empty {}))
}

#[derive(Debug, Deserialize, ToSchema)]
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

#[utoipa::path(post, path = "/v1/locks/{ns}/{shard}/{name}/acquire", tag = "locks", params(LockPath), request_body = AcquireBody,
    responses((status = 200, description = "Granted", body = GrantView)))]
async fn acquire(
    State(gw): State<Gateway>,
    peer: ConnectInfo<Peer>,
    headers: HeaderMap,
    Segments((ns, shard, name)): Segments<(String, String, String)>,
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

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct TokenBody {
    token: String,
}

/// A release: the token, and the session that holds it.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct ReleaseBody {
    token: String,
    /// The session that holds the lock, as `POST /v1/sessions` returned it. The release
    /// is applied only if that session holds the token when it commits. Without it, the
    /// release is bound to the token's holder when the cell receives it (or to nobody:
    /// it then never ends a hold granted later).
    #[serde(default)]
    session: Option<String>,
}

#[utoipa::path(post, path = "/v1/locks/{ns}/{shard}/{name}/release", tag = "locks", params(LockPath), request_body = ReleaseBody,
    responses((status = 200, description = "Released", body = Empty)))]
async fn release(
    State(gw): State<Gateway>,
    peer: ConnectInfo<Peer>,
    headers: HeaderMap,
    Segments((ns, shard, name)): Segments<(String, String, String)>,
    Body(b): Body<ReleaseBody>,
) -> ApiResult<Empty> {
    let ctx = context(peer, &headers);
    let k = key(ns, shard)?;
    let session_id = b.session.as_deref().map(parse_session).transpose()?.map_or(0, |(_, id)| id);
    gw.release(&ctx, pb::ReleaseRequest { shard: shard_ref(&k), name, token: parse_token(&b.token)?, session_id }).await?;
    Ok(Json(Empty {}))
}

#[utoipa::path(post, path = "/v1/locks/{ns}/{shard}/{name}/check", tag = "locks", params(LockPath), request_body = TokenBody,
    responses((status = 200, description = "Whether the token is a current holder's", body = CheckView)))]
async fn check(
    State(gw): State<Gateway>,
    peer: ConnectInfo<Peer>,
    headers: HeaderMap,
    Segments((ns, shard, name)): Segments<(String, String, String)>,
    Body(b): Body<TokenBody>,
) -> ApiResult<CheckView> {
    let ctx = context(peer, &headers);
    let k = key(ns, shard)?;
    let r = gw.check_token(&ctx, pb::CheckTokenRequest { shard: shard_ref(&k), name, token: parse_token(&b.token)? }).await?;
    Ok(Json(CheckView::from(&r)))
}

#[utoipa::path(get, path = "/v1/locks/{ns}/{shard}/{name}", tag = "locks", params(LockPath),
    responses((status = 200, description = "The lock: holders, waiters, token floor", body = LockView)))]
async fn describe(
    State(gw): State<Gateway>,
    peer: ConnectInfo<Peer>,
    headers: HeaderMap,
    Segments((ns, shard, name)): Segments<(String, String, String)>,
) -> ApiResult<LockView> {
    let ctx = context(peer, &headers);
    let k = key(ns, shard)?;
    let d = gw.describe(&ctx, pb::DescribeRequest { shard: shard_ref(&k), name }).await?;
    Ok(Json(LockView::from_pb(&d, |id| session_handle(&k, id))))
}

fn owner_view(o: Option<&rpb::ShardOwner>) -> Result<OwnerView, ApiError> {
    o.map(OwnerView::from).ok_or_else(|| ApiError(status(ErrorCode::Unavailable, "the registry answered without an owner")))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct OwnerQuery {
    /// Ask the registry's leader instead of the gateway's placement cache (which
    /// follows the registry's ownership watch and lags it by the watch's delivery).
    #[serde(default)]
    fresh: bool,
}

/// Where a shard lives: from the gateway's placement cache, or with `fresh=true` from
/// the registry's leader.
#[utoipa::path(get, path = "/v1/shards/{ns}/{shard}/owner", tag = "shards", params(ShardPath, OwnerQuery),
    responses((status = 200, description = "Where the shard lives", body = OwnerView)))]
async fn owner(
    State(gw): State<Gateway>,
    peer: ConnectInfo<Peer>,
    headers: HeaderMap,
    Segments((ns, shard)): Segments<(String, String)>,
    Params(q): Params<OwnerQuery>,
) -> ApiResult<OwnerView> {
    let ctx = context(peer, &headers);
    let k = key(ns, shard)?;
    let req = rpb::GetOwnerRequest { ns: k.ns.to_string(), shard: k.shard.to_string(), fresh: q.fresh };
    let r = gw.get_owner(&ctx, req).await?;
    Ok(Json(owner_view(r.owner.as_ref())?))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct MoveBody {
    to_cell: String,
    #[serde(default = "yes")]
    planned: bool,
    /// Unplanned only: the source's cells are confirmed down or cut off from every
    /// client; the move completes without waiting out their ownership lease. Needs
    /// `reason`; audited.
    #[serde(default)]
    fence_confirmed: bool,
    #[serde(default)]
    reason: String,
}

fn yes() -> bool {
    true
}

#[utoipa::path(post, path = "/v1/shards/{ns}/{shard}/move", tag = "shards", params(ShardPath), request_body = MoveBody,
    responses((status = 200, description = "The owner record after the call (moving)", body = OwnerView)))]
async fn move_shard(
    State(gw): State<Gateway>,
    peer: ConnectInfo<Peer>,
    headers: HeaderMap,
    Segments((ns, shard)): Segments<(String, String)>,
    Body(b): Body<MoveBody>,
) -> ApiResult<OwnerView> {
    let ctx = context(peer, &headers);
    let k = key(ns, shard)?;
    let req = rpb::MoveShardRequest {
        ns: k.ns.to_string(),
        shard: k.shard.to_string(),
        to_cell: b.to_cell,
        planned: b.planned,
        fence_confirmed: b.fence_confirmed,
        reason: b.reason,
    };
    let r = gw.registry(&ctx, Need::Operator, req, |mut c, r| async move { c.move_shard(r).await }).await?;
    Ok(Json(owner_view(r.owner.as_ref())?))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct BreakBody {
    reason: String,
}

#[derive(Debug, Serialize, ToSchema)]
struct BreakAnswer {
    new_floor: String,
}

#[utoipa::path(post, path = "/v1/admin/locks/{ns}/{shard}/{name}/break", tag = "admin", params(LockPath), request_body = BreakBody,
    responses((status = 200, description = "Broken: every later token is above the new floor", body = BreakAnswer)))]
async fn break_lock(
    State(gw): State<Gateway>,
    peer: ConnectInfo<Peer>,
    headers: HeaderMap,
    Segments((ns, shard, name)): Segments<(String, String, String)>,
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

    /// docs/openapi.json is the served document, kept in the repository for readers
    /// and for client generators.
    #[test]
    fn the_openapi_document_in_docs_is_current() {
        let served = serde_json::to_string_pretty(&openapi()).unwrap() + "\n";
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi.json");
        if std::fs::read_to_string(&path).ok().as_deref() != Some(served.as_str()) {
            let fresh = std::env::temp_dir().join("holdfast-openapi.json");
            std::fs::write(&fresh, &served).unwrap();
            panic!("docs/openapi.json is not what the gateway serves: cp {} docs/openapi.json", fresh.display());
        }
    }

    /// Every operation of the document is served: each documented method and path
    /// (parameters filled in) reaches a handler, where an undocumented one is the
    /// router's 404 or 405. (The reverse holds by construction: routes are registered
    /// only with their operation, in [`api`].)
    /// The router over a gateway that knows no registry (every call that gets past
    /// its checks fails upstream, fast).
    fn app() -> Router {
        let transport = holdfast_rpc::Transport::insecure();
        let placement = crate::placement::Placement::new(&transport, vec![]);
        let gw = Gateway::new(placement, Arc::new(crate::access::Access::new(false)), holdfast_rpc::Tasks::new(), Duration::from_millis(200));
        let peer = Peer { addr: "127.0.0.1:1".parse().unwrap(), tls: false, identity: None };
        router(gw).layer(axum::extract::connect_info::MockConnectInfo(peer))
    }

    #[tokio::test]
    async fn malformed_queries_and_paths_are_invalid_argument_in_the_error_shape() {
        use tower::ServiceExt;
        for uri in ["/v1/shards?page_size=many", "/v1/shards/events?from_revision=-1", "/v1/namespaces/%FF", "/v1/shards?page_size=0", "/v1/sessions"] {
            let resp = app().oneshot(Request::builder().uri(uri).body(axum::body::Body::empty()).unwrap()).await.unwrap();
            assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{uri}");
            let body: serde_json::Value = serde_json::from_slice(&axum::body::to_bytes(resp.into_body(), 1 << 16).await.unwrap()).unwrap();
            assert_eq!(body["code"], "INVALID_ARGUMENT", "{uri}: {body}");
        }
        let resume = Request::builder().uri("/v1/shards/events").header("last-event-id", "seven").body(axum::body::Body::empty()).unwrap();
        assert_eq!(app().oneshot(resume).await.unwrap().status(), StatusCode::BAD_REQUEST);
    }

    #[tokio::test]
    async fn every_documented_operation_is_served() {
        use tower::ServiceExt;
        let app = app();
        let served = |method: &str, path: &str| {
            let req = Request::builder().method(method).uri(path).header("content-type", "application/json").body(axum::body::Body::from("{}")).unwrap();
            let app = app.clone();
            async move {
                let resp = app.oneshot(req).await.unwrap();
                // The router's own refusals carry no error code; a handler's always do.
                !(matches!(resp.status(), StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED) && resp.extensions().get::<ErrorCode>().is_none())
            }
        };
        let doc = serde_json::to_value(openapi()).unwrap();
        let mut ops = 0;
        for (path, item) in doc["paths"].as_object().unwrap() {
            let concrete = path.replace("{ns}", "pay").replace("{shard}", "default").replace("{name}", "m").replace("{id}", "pay:default:01");
            for method in item.as_object().unwrap().keys() {
                assert!(served(&method.to_uppercase(), &concrete).await, "{method} {path} is documented but not served");
                ops += 1;
            }
        }
        assert!(ops >= 18, "the document lists {ops} operations");
        assert!(!served("GET", "/v1/nothing-here").await && !served("PUT", "/v1/namespaces").await, "the check tells served from not served");
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
