//! Traces across processes: the W3C `traceparent` of a call is read at the door into
//! the span that serves it ([`ServerSpans`], a layer of every gRPC server the
//! transport builds), and every call made on its behalf carries the span current at
//! that moment ([`outgoing`], used by `CallContext::request`). Spans are `tracing`
//! spans; whether they leave the process (OTLP) is decided by the subscriber a
//! process installs (`holdfast-telemetry`). Without one, the incoming context is
//! passed on unchanged, so a trace crosses a process that does not export.

use crate::status::{CODE_METADATA, TRACEPARENT, TRACESTATE};
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

struct Carrier<'a>(&'a mut HashMap<String, String>);

impl Injector for Carrier<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key.to_owned(), value);
    }
}

struct Headers<'a>(&'a http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

/// Makes the trace of `headers` (if any) the parent of `span`.
pub fn continue_from(span: &tracing::Span, headers: &http::HeaderMap) {
    if headers.contains_key(TRACEPARENT) {
        let cx = TraceContextPropagator::new().extract(&Headers(headers));
        let _ = span.set_parent(cx);
    }
}

/// The `traceparent` and `tracestate` of the current span, when it belongs to an
/// exported trace; `None` when no span is current or traces are not exported.
pub fn outgoing() -> Option<(String, Option<String>)> {
    let cx = tracing::Span::current().context();
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut map = HashMap::new();
    TraceContextPropagator::new().inject_context(&cx, &mut Carrier(&mut map));
    let tp = map.remove(TRACEPARENT)?;
    Some((tp, map.remove(TRACESTATE).filter(|s| !s.is_empty())))
}

/// What a server's door saw of one call: its route (the gRPC path), its stable code
/// (`OK` on success) and how long it took to answer.
pub type Observer = Arc<dyn Fn(&str, &str, Duration) + Send + Sync>;

/// A tower layer for gRPC servers: each call runs in a `rpc.server` span, the child
/// of the caller's trace when it sent one; at a front door (`new_traces`) a call
/// without one starts a trace. An [`Observer`] may count the calls.
#[derive(Clone, Default)]
pub struct ServerSpans {
    new_traces: bool,
    observer: Option<Observer>,
}

impl std::fmt::Debug for ServerSpans {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerSpans").field("new_traces", &self.new_traces).field("observed", &self.observer.is_some()).finish()
    }
}

impl ServerSpans {
    /// Continues incoming traces only: a cluster-internal port, where a call without a
    /// trace (a heartbeat, a renewal loop) is not worth one.
    pub fn internal() -> ServerSpans {
        ServerSpans::default()
    }

    /// A front door: every call is traced, and `observer` sees each answer.
    pub fn front_door(observer: Observer) -> ServerSpans {
        ServerSpans { new_traces: true, observer: Some(observer) }
    }
}

impl<S> tower::Layer<S> for ServerSpans {
    type Service = Spanned<S>;
    fn layer(&self, inner: S) -> Spanned<S> {
        Spanned { inner, layer: self.clone() }
    }
}

/// The service [`ServerSpans`] wraps around a server's routes.
#[derive(Clone, Debug)]
pub struct Spanned<S> {
    inner: S,
    layer: ServerSpans,
}

/// The stable code of a gRPC answer from its headers: a trailers-only error carries
/// `grpc-status` (and holdfast's `holdfast-code`) there; a success has neither.
fn code_of(headers: &http::HeaderMap) -> String {
    if let Some(c) = headers.get(CODE_METADATA).and_then(|v| v.to_str().ok()) {
        return c.to_owned();
    }
    match headers.get("grpc-status").and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<i32>().ok()) {
        None | Some(0) => "OK".to_owned(),
        Some(n) => format!("{:?}", tonic::Code::from_i32(n)).to_uppercase(),
    }
}

impl<S, B, R> tower::Service<http::Request<B>> for Spanned<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let traced = self.layer.new_traces || req.headers().contains_key(TRACEPARENT);
        let span = if traced {
            let path = req.uri().path();
            let span = tracing::info_span!("rpc.server", otel.name = path.trim_start_matches('/'), otel.kind = "server", rpc.method = path);
            continue_from(&span, req.headers());
            span
        } else {
            tracing::Span::none()
        };
        let observer = self.layer.observer.clone();
        let route = observer.as_ref().map(|_| req.uri().path().trim_start_matches('/').to_owned());
        let started = Instant::now();
        // The clone is ready only if the original was: take the ready one.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(
            async move {
                let answer = inner.call(req).await;
                if let (Some(observe), Some(route)) = (observer, route) {
                    let code = answer.as_ref().map_or_else(|_| "UNAVAILABLE".to_owned(), |r| code_of(r.headers()));
                    observe(&route, &code, started.elapsed());
                }
                answer
            }
            .instrument(span),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_of_answers() {
        let mut h = http::HeaderMap::new();
        assert_eq!(code_of(&h), "OK");
        h.insert("grpc-status", "0".parse().unwrap());
        assert_eq!(code_of(&h), "OK");
        h.insert("grpc-status", "12".parse().unwrap());
        assert_eq!(code_of(&h), "UNIMPLEMENTED");
        h.insert(CODE_METADATA, "NOT_OWNER".parse().unwrap());
        assert_eq!(code_of(&h), "NOT_OWNER");
    }

    #[test]
    fn no_exported_span_means_nothing_to_send() {
        // No subscriber with an OpenTelemetry layer: the caller passes on what it got.
        assert!(outgoing().is_none());
    }
}
