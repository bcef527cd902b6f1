//! How a `holdfast` process logs, to stderr: text for people — with colours only when
//! stderr is a terminal, so a log file or a pipe gets plain lines — or, with
//! `--log-format json`, one JSON object per line for a log pipeline (`timestamp`,
//! `level`, `target`, `message` and the event's fields at the top level). `holdfast
//! dev` passes its format on to every process it starts.

use std::io::IsTerminal;
use std::sync::OnceLock;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

static FORMAT: OnceLock<LogFormat> = OnceLock::new();

/// Installs the process's subscriber: `RUST_LOG` if set, else `default_filter`.
pub fn init(format: LogFormat, default_filter: &str) {
    let _ = FORMAT.set(format);
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default_filter.into());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(false).with_span_list(false).init(),
    }
}

/// The flags that give a child `holdfast` process this process's log format.
pub fn child_args() -> Vec<String> {
    match FORMAT.get() {
        Some(LogFormat::Json) => vec!["--log-format".into(), "json".into()],
        _ => Vec::new(),
    }
}
