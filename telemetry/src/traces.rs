//! Traces out of a process: OpenTelemetry over OTLP/gRPC, off unless an endpoint is
//! configured (`--otlp-endpoint`, or the standard `OTEL_EXPORTER_OTLP_ENDPOINT` /
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`). The other standard variables are the SDK's
//! own: `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER` and
//! `OTEL_TRACES_SAMPLER_ARG` (default: parent-based, always on), `OTEL_BSP_*` for
//! batching, `OTEL_SDK_DISABLED=true` to turn it all off.
//!
//! What is traced and how the trace crosses processes: `holdfast_rpc::trace`.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use tracing_opentelemetry::OpenTelemetryLayer;

/// The OTLP pipeline of a process: flush it before the process exits.
#[derive(Debug)]
pub struct Traces {
    provider: SdkTracerProvider,
}

impl Traces {
    /// Sends what is buffered and stops the exporter (within its own timeout).
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown() {
            eprintln!("traces: flushing at exit failed: {e}");
        }
    }

    /// Sends what is buffered now.
    pub fn flush(&self) {
        let _ = self.provider.force_flush();
    }
}

fn env_set(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.trim().is_empty())
}

/// The `tracing` layer that hands spans to the exporter.
pub type SpanLayer<S> = OpenTelemetryLayer<S, SdkTracer>;

/// Is trace export asked for, by `endpoint` or the environment?
pub fn wanted(endpoint: Option<&str>) -> bool {
    if std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true")) {
        return false;
    }
    endpoint.is_some_and(|e| !e.is_empty()) || env_set("OTEL_EXPORTER_OTLP_ENDPOINT") || env_set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
}

/// The tracing layer that exports spans over OTLP, and the pipeline behind it; `None`
/// when export is not asked for ([`wanted`]). Must run inside a tokio runtime (the
/// exporter's channel lives on it). `service` names the process when
/// `OTEL_SERVICE_NAME` does not. Also makes the pipeline the global tracer provider,
/// which the Raft stage spans use.
pub fn otlp<S>(endpoint: Option<&str>, service: &str) -> Result<Option<(SpanLayer<S>, Traces)>, String>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    if !wanted(endpoint) {
        return Ok(None);
    }
    let mut exporter = opentelemetry_otlp::SpanExporter::builder().with_tonic();
    if let Some(e) = endpoint.filter(|e| !e.is_empty()) {
        exporter = exporter.with_endpoint(e);
    }
    let exporter = exporter.build().map_err(|e| format!("cannot build the OTLP exporter: {e}"))?;
    let mut resource = Resource::builder();
    if !env_set("OTEL_SERVICE_NAME") {
        resource = resource.with_service_name(service.to_owned());
    }
    let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource.build()).build();
    opentelemetry::global::set_tracer_provider(provider.clone());
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("holdfast"));
    Ok(Some((layer, Traces { provider })))
}
