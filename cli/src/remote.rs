//! How every command reaches a holdfast deployment: one transport per process (the
//! wire edge's pool and limits), and a leader-following caller over the endpoints the
//! operator named — gateways, or the nodes of one cell or of the registry — that
//! follows `NOT_LEADER` hints, moves past an endpoint that does not answer, and
//! retries what may succeed on retry, saying so on stderr.

use holdfast_rpc::{Budget, CallError, Channel, Hints, Retry, RetryPolicy, Transport, Upstream};
use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

/// How long a command keeps retrying a transient failure (an election, a shard being
/// adopted) before it reports it.
const RETRY_FOR: Duration = Duration::from_secs(10);

/// The process's transport.
pub fn transport() -> &'static Transport {
    static T: OnceLock<Transport> = OnceLock::new();
    T.get_or_init(Transport::default)
}

/// `a:1,b:2` as a list, each entry checked.
pub fn endpoint_list(endpoints: &str) -> Result<Vec<String>, String> {
    let list: Vec<String> = endpoints.split(',').map(str::trim).filter(|e| !e.is_empty()).map(str::to_owned).collect();
    if list.is_empty() {
        return Err("no endpoint given".into());
    }
    for e in &list {
        holdfast_rpc::host_port(e).map_err(|e| e.to_string())?;
    }
    Ok(list)
}

/// The endpoints of one command.
#[derive(Debug)]
pub struct Remote {
    upstream: Upstream,
}

impl Remote {
    /// `endpoints`: comma-separated `host:port`s (names or IPs).
    pub fn new(endpoints: &str) -> Result<Remote, String> {
        Ok(Remote { upstream: Upstream::new(transport(), endpoint_list(endpoints)?, Hints::Anywhere) })
    }

    /// Calls `f` until it succeeds, fails for good, or [`RETRY_FOR`] passes; each
    /// retryable failure is shown on stderr.
    pub async fn call<T, F, Fut>(&self, f: F) -> Result<T, String>
    where
        F: FnMut(Channel) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let per_attempt = transport().options().request_timeout();
        let retry = Retry { policy: RetryPolicy::default(), give_up: tokio::time::Instant::now() + RETRY_FOR, stop: None };
        let shown = |e: &CallError, _: Duration| eprintln!("{e} — retrying");
        match self.upstream.call_retrying(|| per_attempt, retry, shown, f).await {
            Ok(c) => Ok(c.value),
            Err(e) => Err(e.map_or_else(|| "stopped".to_owned(), |e| e.to_string())),
        }
    }

    /// One pass over the endpoints, for a write that must not be sent twice blindly
    /// (its outcome, if it fails on the way, is for the operator to check).
    pub async fn once<T, F, Fut>(&self, f: F) -> Result<T, String>
    where
        F: FnMut(Channel) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let budget = Budget::per_attempt(transport().options().request_timeout());
        self.upstream.call(budget, f).await.map(|c| c.value).map_err(|e| e.to_string())
    }
}

/// A connection to one node, now (a Raft port asked for its own metrics).
pub async fn connect(addr: &str) -> Result<Channel, String> {
    transport().connect(addr).await.map_err(|e| e.to_string())
}

/// Serves `app` on a loopback port for the rest of the process (the fenced test
/// resources of `demo` and `drill`, which worker processes post to); returns its base
/// URL.
pub async fn serve_local(app: axum::Router) -> Result<String, String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        if let Err(e) = transport().serve_http(app, listener, std::future::pending()).await {
            tracing::warn!(error = %e, "the local resource endpoint stopped");
        }
    });
    Ok(format!("http://{addr}"))
}
