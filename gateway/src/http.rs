//! The HTTP/JSON front (axum on hyper), documented in `docs/api.md`. Every handler
//! builds the protobuf request and goes through [`Gateway`], so both fronts share one
//! path. Errors are `{"code": "...", "message": "..."}` with the status of
//! `ErrorCode::http_status`. Tokens and session ids are JSON *strings*: a token
//! exceeds 2^53 from epoch 8192, and JavaScript numbers would round it.

use crate::gateway::Gateway;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use holdfast_core::{ErrorCode, ShardKey};
use holdfast_proto::admin::v1 as apb;
use holdfast_proto::convert::shard_key;
use holdfast_proto::lock::v1 as pb;
use holdfast_proto::registry::v1 as rpb;
use holdfast_proto::status::{code_of, status};
use serde::Deserialize;
use serde_json::{json, Value};
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
        (http, Json(json!({ "code": code.as_str(), "message": self.0.message() }))).into_response()
    }
}

type ApiResult = Result<Json<Value>, ApiError>;

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError(status(ErrorCode::InvalidArgument, msg.into(), None))
}

fn key(ns: String, shard: String) -> Result<ShardKey, ApiError> {
    shard_key(ns, shard).map_err(|e| bad(e.to_string()))
}

fn shard_ref(k: &ShardKey) -> Option<pb::ShardRef> {
    Some(pb::ShardRef { ns: k.ns.to_string(), shard: k.shard.to_string(), epoch: 0 })
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
        .with_state(gw)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NamespaceBody {
    name: String,
    owner: String,
    /// `correctness` (default) or `efficiency`.
    #[serde(default)]
    intent: Option<String>,
    /// `fail-closed` or `fail-open`; default by intent.
    #[serde(default)]
    posture: Option<String>,
    #[serde(default)]
    ttl_min_ms: u64,
    #[serde(default)]
    ttl_max_ms: u64,
    #[serde(default)]
    max_hold_ms: u64,
    #[serde(default)]
    lock_delay_ms: u64,
    #[serde(default)]
    acquires_per_second: u32,
    #[serde(default)]
    max_keys: u32,
}

fn namespace_json(c: &apb::NamespaceConfig) -> Value {
    let intent = if c.intent == pb::Intent::Efficiency as i32 { "efficiency" } else { "correctness" };
    let posture = if c.posture == pb::Posture::FailOpen as i32 { "fail-open" } else { "fail-closed" };
    let q = c.quotas.clone().unwrap_or_default();
    json!({
        "name": c.name, "owner": c.owner, "intent": intent, "posture": posture,
        "ttl_min_ms": c.ttl_min_ms, "ttl_max_ms": c.ttl_max_ms, "max_hold_ms": c.max_hold_ms,
        "lock_delay_ms": c.lock_delay_ms, "version": c.version,
        "quotas": { "max_keys": q.max_keys, "max_sessions": q.max_sessions, "max_waiters_per_lock": q.max_waiters_per_lock,
                    "max_value_bytes": q.max_value_bytes, "acquires_per_second": q.acquires_per_second },
    })
}

async fn create_namespace(State(gw): State<Gateway>, Json(b): Json<NamespaceBody>) -> ApiResult {
    let intent = match b.intent.as_deref() {
        None | Some("correctness") => pb::Intent::Correctness,
        Some("efficiency") => pb::Intent::Efficiency,
        Some(o) => return Err(bad(format!("intent {o:?} is not correctness or efficiency"))),
    };
    let posture = match b.posture.as_deref() {
        None => pb::Posture::Unspecified,
        Some("fail-closed") => pb::Posture::FailClosed,
        Some("fail-open") => pb::Posture::FailOpen,
        Some(o) => return Err(bad(format!("posture {o:?} is not fail-closed or fail-open"))),
    };
    let quotas = (b.acquires_per_second != 0 || b.max_keys != 0).then(|| apb::Quotas {
        acquires_per_second: b.acquires_per_second,
        max_keys: b.max_keys,
        ..Default::default()
    });
    let config = apb::NamespaceConfig {
        name: b.name,
        owner: b.owner,
        intent: intent as i32,
        posture: posture as i32,
        ttl_min_ms: b.ttl_min_ms,
        ttl_max_ms: b.ttl_max_ms,
        max_hold_ms: b.max_hold_ms,
        lock_delay_ms: b.lock_delay_ms,
        quotas,
        version: 0,
    };
    let req = rpb::CreateNamespaceRequest { config: Some(config) };
    let r = gw
        .registry(|mut c| {
            let req = req.clone();
            async move { c.create_namespace(req).await }
        })
        .await?;
    Ok(Json(r.config.as_ref().map(namespace_json).unwrap_or(Value::Null)))
}

async fn get_namespace(State(gw): State<Gateway>, Path(ns): Path<String>) -> ApiResult {
    let req = rpb::GetNamespaceRequest { name: ns };
    let r = gw
        .registry(|mut c| {
            let req = req.clone();
            async move { c.get_namespace(req).await }
        })
        .await?;
    Ok(Json(r.config.as_ref().map(namespace_json).unwrap_or(Value::Null)))
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

async fn create_session(State(gw): State<Gateway>, Json(b): Json<SessionBody>) -> ApiResult {
    let k = key(b.ns, b.shard)?;
    let r = gw.create_session(pb::CreateSessionRequest { shard: shard_ref(&k), ttl_ms: b.ttl_ms, client_label: b.label }).await?;
    Ok(Json(json!({ "session": session_handle(&k, r.session_id), "ttl_remaining_ms": r.ttl_remaining_ms })))
}

async fn keep_alive(State(gw): State<Gateway>, Path(id): Path<String>) -> ApiResult {
    let (k, sid) = parse_session(&id)?;
    let r = gw.keep_alive_once(&k, sid).await?;
    Ok(Json(json!({ "session": id, "ttl_remaining_ms": r.ttl_remaining_ms })))
}

async fn close_session(State(gw): State<Gateway>, Path(id): Path<String>) -> ApiResult {
    let (k, sid) = parse_session(&id)?;
    gw.close_session(&k, sid).await?;
    Ok(Json(json!({})))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AcquireBody {
    session: String,
    request_id: String,
    /// `exclusive` (default) or `shared`.
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    wait_timeout_ms: u64,
    /// The holder's payload, UTF-8 (at most the namespace's max value size).
    #[serde(default)]
    value: String,
}

async fn acquire(State(gw): State<Gateway>, Path((ns, shard, name)): Path<(String, String, String)>, Json(b): Json<AcquireBody>) -> ApiResult {
    let k = key(ns, shard)?;
    let (sk, sid) = parse_session(&b.session)?;
    if sk != k {
        return Err(bad(format!("session {} lives in shard {sk}, not {k}", b.session)));
    }
    let mode = match b.mode.as_deref() {
        None | Some("exclusive") => pb::Mode::Exclusive,
        Some("shared") => pb::Mode::Shared,
        Some(o) => return Err(bad(format!("mode {o:?} is not exclusive or shared"))),
    };
    let r = gw
        .acquire(pb::AcquireRequest {
            shard: shard_ref(&k),
            name,
            session_id: sid,
            mode: mode as i32,
            wait_timeout_ms: b.wait_timeout_ms,
            request_id: b.request_id,
            value: b.value.into_bytes(),
        })
        .await?;
    Ok(Json(json!({
        "token": r.token.to_string(), "ttl_remaining_ms": r.ttl_remaining_ms, "epoch": r.epoch, "unfenced": r.unfenced,
    })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenBody {
    token: String,
}

async fn release(State(gw): State<Gateway>, Path((ns, shard, name)): Path<(String, String, String)>, Json(b): Json<TokenBody>) -> ApiResult {
    let k = key(ns, shard)?;
    gw.release(pb::ReleaseRequest { shard: shard_ref(&k), name, token: parse_token(&b.token)? }).await?;
    Ok(Json(json!({})))
}

async fn check(State(gw): State<Gateway>, Path((ns, shard, name)): Path<(String, String, String)>, Json(b): Json<TokenBody>) -> ApiResult {
    let k = key(ns, shard)?;
    let r = gw.check_token(pb::CheckTokenRequest { shard: shard_ref(&k), name, token: parse_token(&b.token)? }).await?;
    let current = r.status == pb::TokenStatus::Current as i32;
    Ok(Json(json!({ "current": current, "status": if current { "CURRENT" } else { "STALE" } })))
}

async fn describe(State(gw): State<Gateway>, Path((ns, shard, name)): Path<(String, String, String)>) -> ApiResult {
    let k = key(ns, shard)?;
    let d = gw.describe(pb::DescribeRequest { shard: shard_ref(&k), name }).await?;
    let holders: Vec<Value> = d
        .holders
        .iter()
        .map(|h| {
            json!({ "session": session_handle(&k, h.session_id), "token": h.token.to_string(),
                    "value": String::from_utf8_lossy(&h.value), "held_for_ms": h.held_for_ms })
        })
        .collect();
    let waiters: Vec<Value> = d.waiters.iter().map(|w| json!({ "session": session_handle(&k, w.session_id), "request_id": w.request_id })).collect();
    let last_break =
        d.last_break.as_ref().map(|b| json!({ "token": b.token.to_string(), "by": b.by, "reason": b.reason, "new_floor": b.new_floor.to_string() }));
    Ok(Json(json!({
        "name": d.name, "holders": holders, "waiters": waiters, "token_floor": d.token_floor.to_string(),
        "epoch": d.epoch, "lock_delayed": d.lock_delayed, "last_break": last_break, "revision": d.revision,
    })))
}

fn owner_json(o: &rpb::ShardOwner) -> Value {
    let state = if o.state == rpb::ShardState::Moving as i32 { "moving" } else { "active" };
    json!({ "ns": o.ns, "shard": o.shard, "region": o.region, "cell": o.cell, "epoch": o.epoch, "state": state,
            "to_cell": o.to_cell, "planned": o.planned })
}

async fn owner(State(gw): State<Gateway>, Path((ns, shard)): Path<(String, String)>) -> ApiResult {
    let k = key(ns, shard)?;
    let r = gw.get_owner(&k).await?;
    Ok(Json(r.owner.as_ref().map(owner_json).unwrap_or(Value::Null)))
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

async fn move_shard(State(gw): State<Gateway>, Path((ns, shard)): Path<(String, String)>, Json(b): Json<MoveBody>) -> ApiResult {
    let k = key(ns, shard)?;
    let req = rpb::MoveShardRequest { ns: k.ns.to_string(), shard: k.shard.to_string(), to_cell: b.to_cell, planned: b.planned };
    let r = gw
        .registry(|mut c| {
            let req = req.clone();
            async move { c.move_shard(req).await }
        })
        .await?;
    Ok(Json(r.owner.as_ref().map(owner_json).unwrap_or(Value::Null)))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BreakBody {
    reason: String,
}

async fn break_lock(
    State(gw): State<Gateway>,
    headers: HeaderMap,
    Path((ns, shard, name)): Path<(String, String, String)>,
    Json(b): Json<BreakBody>,
) -> ApiResult {
    let k = key(ns, shard)?;
    if b.reason.trim().is_empty() {
        return Err(bad("a break needs a reason: it goes to the audit record"));
    }
    let identity = headers.get("x-holdfast-identity").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let r = gw.break_lock(pb::BreakLockRequest { shard: shard_ref(&k), name, reason: b.reason }, identity).await?;
    Ok(Json(json!({ "new_floor": r.new_floor.to_string() })))
}
