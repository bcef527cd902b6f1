//! How a `holdfast` process logs, to stderr: text for people — with colours only when
//! stderr is a terminal, so a log file or a pipe gets plain lines — or, with
//! `--log-format json`, one JSON object per line for a log pipeline (`timestamp`,
//! `level`, `target`, `message` and the event's fields at the top level). `holdfast
//! dev` passes its format on to every process it starts. Spans go out over OTLP when
//! an endpoint is configured (`--otlp-endpoint` or `OTEL_EXPORTER_OTLP_ENDPOINT`).

use std::io::IsTerminal;
use std::sync::OnceLock;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

static FORMAT: OnceLock<LogFormat> = OnceLock::new();
static OTLP_ENDPOINT: OnceLock<Option<String>> = OnceLock::new();

/// What `tracing` spans and events the OTLP exporter gets: holdfast's own, at info
/// (the spans of a call's path: the door, the upstream call, the cell's handler, the
/// queue wait, the Raft proposal). Not `RUST_LOG`, which is for the log lines.
const TRACE_FILTER: &str =
    "off,holdfast=info,holdfast_rpc=info,holdfast_raft=info,holdfast_cell=info,holdfast_registry=info,holdfast_gateway=info,holdfast_client=info,holdfast_drills=info";

/// Installs the process's subscriber: log lines on stderr by `RUST_LOG` if set, else
/// `default_filter`; and, when an OTLP endpoint is configured (`otlp_endpoint` or the
/// standard `OTEL_*` variables: `holdfast_telemetry::traces`), spans exported as
/// `service` (unless `OTEL_SERVICE_NAME` names it). Call inside the runtime; flush the
/// returned pipeline before exiting.
pub fn init(format: LogFormat, default_filter: &str, otlp_endpoint: Option<&str>, service: &str) -> Option<holdfast_telemetry::traces::Traces> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let _ = FORMAT.set(format);
    let _ = OTLP_ENDPOINT.set(otlp_endpoint.map(str::to_owned));
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default_filter.into());
    let lines = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let lines = match format {
        LogFormat::Text => lines.with_ansi(std::io::stderr().is_terminal()).with_filter(filter).boxed(),
        LogFormat::Json => lines.json().flatten_event(true).with_current_span(false).with_span_list(false).with_filter(filter).boxed(),
    };
    let (spans, traces) = match holdfast_telemetry::traces::otlp(otlp_endpoint, service) {
        Ok(Some((layer, traces))) => (Some(layer.with_filter(tracing_subscriber::EnvFilter::new(TRACE_FILTER))), Some(traces)),
        Ok(None) => (None, None),
        Err(e) => {
            eprintln!("warning: traces are not exported: {e}");
            (None, None)
        }
    };
    tracing_subscriber::registry().with(lines).with(spans).init();
    traces
}

/// The flags that give a child `holdfast` process this process's log format and
/// trace endpoint.
pub fn child_args() -> Vec<String> {
    let mut args = match FORMAT.get() {
        Some(LogFormat::Json) => vec!["--log-format".into(), "json".into()],
        _ => Vec::new(),
    };
    // The OTEL_* variables reach children through the environment they inherit.
    if let Some(Some(e)) = OTLP_ENDPOINT.get() {
        args.extend(["--otlp-endpoint".to_owned(), e.clone()]);
    }
    args
}
