//! The gateway's front door, measured and traced the same way on both fronts: every
//! call is counted by front, route and stable code, timed from arrival to answer
//! (`holdfast_gateway_requests_total`, `holdfast_gateway_request_duration_seconds`),
//! and served inside a span that continues the caller's W3C trace or starts one. The
//! gRPC front gets this from the wire edge's layer ([`grpc_observer`]); the HTTP front
//! from [`http_layer`].

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use holdfast_core::metric_names as m;
use holdfast_core::ErrorCode;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Instrument;

fn observe(front: &'static str, route: &str, code: &str, took: Duration) {
    metrics::counter!(m::GATEWAY_REQUESTS, "front" => front, "route" => route.to_owned(), "code" => code.to_owned()).increment(1);
    metrics::histogram!(m::GATEWAY_REQUEST_DURATION, "front" => front, "route" => route.to_owned()).record(took.as_secs_f64());
}

/// What the gRPC front door reports each answer to (routes are gRPC paths, so their
/// number is bounded by the services served).
pub fn grpc_observer() -> holdfast_rpc::trace::Observer {
    Arc::new(|route, code, took| observe("grpc", route, code, took))
}

/// The HTTP front door: a span per call and its count. The route is the matched
/// pattern (`POST /v1/locks/{ns}/{shard}/{name}/acquire`), never the raw path, so
/// names in URLs do not become label values.
pub async fn http_layer(req: Request, next: Next) -> Response {
    let pattern = req.extensions().get::<MatchedPath>().map_or("unmatched", |p| p.as_str());
    let route = format!("{} {pattern}", req.method());
    let span = tracing::info_span!("http.server", otel.name = %route, otel.kind = "server", http.route = %route);
    holdfast_rpc::trace::continue_from(&span, req.headers());
    let started = Instant::now();
    let resp = next.run(req).instrument(span).await;
    let code = match resp.extensions().get::<ErrorCode>() {
        Some(c) => c.as_str().to_owned(),
        None if resp.status().is_success() => "OK".to_owned(),
        None => format!("HTTP_{}", resp.status().as_u16()),
    };
    observe("http", &route, &code, started.elapsed());
    resp
}
