//! How every command reaches a holdfast deployment: one transport per process (the
//! wire edge's pool, limits and mutual TLS with the operator's client certificate),
//! and a leader-following caller over the endpoints the operator named — gateways, or
//! the nodes of one cell or of the registry — that follows `NOT_LEADER` hints, moves
//! past an endpoint that does not answer, and retries what may succeed on retry, saying
//! so on stderr.

use clap::Args;
use holdfast_proto::raft::v1 as rpb;
use holdfast_proto::raft::v1::raft_admin_client::RaftAdminClient;
use holdfast_rpc::{Budget, CallError, CertFiles, Channel, Hints, Retry, RetryPolicy, Security, TlsMaterial, Transport, TransportOptions, Upstream};
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// How long a command keeps retrying a transient failure (an election, a shard being
/// adopted) before it reports it.
const RETRY_FOR: Duration = Duration::from_secs(10);

/// How a command proves who it is: a client certificate of the cluster's CA.
#[derive(Debug, Args, Clone, Default)]
pub struct ClientTls {
    /// Directory with `ca.crt` and `client.<user>.crt`/`.key`. Default: the
    /// playground's (`$HOLDFAST_PLAYGROUND/certs`), else `~/.holdfast/certs`.
    #[arg(long, env = "HOLDFAST_CERTS_DIR")]
    pub certs_dir: Option<PathBuf>,
    /// Whose client certificate to present.
    #[arg(long, env = "HOLDFAST_USER", default_value = "root")]
    pub user: String,
    /// Plaintext, no certificate: only for a deployment run with --insecure.
    #[arg(long)]
    pub insecure: bool,
}

impl ClientTls {
    /// The certificates directory to use, by the order of the flag's doc.
    fn dir(&self) -> Option<PathBuf> {
        self.certs_dir.clone().or_else(|| std::env::var_os("HOLDFAST_PLAYGROUND").map(|d| PathBuf::from(d).join("certs"))).or_else(|| {
            let home = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".holdfast/certs"))?;
            home.is_dir().then_some(home)
        })
    }

    /// The same settings as command-line flags, for a child process.
    pub fn args(&self) -> Vec<String> {
        match (&self.certs_dir, self.insecure) {
            (_, true) => vec!["--insecure".into()],
            (Some(d), false) => vec!["--certs-dir".into(), d.display().to_string(), "--user".into(), self.user.clone()],
            (None, false) => vec!["--user".into(), self.user.clone()],
        }
    }

    pub fn security(&self) -> Result<Security, String> {
        if self.insecure {
            return Ok(Security::Insecure);
        }
        let dir = self.dir().ok_or("no client certificate: pass --certs-dir (or HOLDFAST_CERTS_DIR), or --insecure for a deployment run with --insecure")?;
        let files = CertFiles::user(&dir, &self.user);
        Ok(Security::Tls(Arc::new(TlsMaterial::load(files)?)))
    }
}

/// The process's transport: built once, from the first command's TLS flags.
pub fn transport(tls: &ClientTls) -> Result<&'static Transport, String> {
    static T: OnceLock<Transport> = OnceLock::new();
    if let Some(t) = T.get() {
        return Ok(t);
    }
    let t = Transport::new(TransportOptions::default(), tls.security()?);
    Ok(T.get_or_init(|| t))
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
    pub fn new(endpoints: &str, tls: &ClientTls) -> Result<Remote, String> {
        Ok(Remote { upstream: Upstream::new(transport(tls)?, endpoint_list(endpoints)?, Hints::Anywhere) })
    }

    pub fn transport(&self) -> &Transport {
        self.upstream.transport()
    }

    /// Calls `f` until it succeeds, fails for good, or [`RETRY_FOR`] passes; each
    /// retryable failure is shown on stderr.
    pub async fn call<T, F, Fut>(&self, f: F) -> Result<T, String>
    where
        F: FnMut(Channel) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        self.retrying(f).await.map_err(|e| e.map_or_else(|| "stopped".to_owned(), |e| e.to_string()))
    }

    /// As [`Remote::call`], with the final refusal as a status, for a command that
    /// treats one code as an answer (`ALREADY_EXISTS` from an idempotent step).
    pub async fn call_status<T, F, Fut>(&self, f: F) -> Result<T, tonic::Status>
    where
        F: FnMut(Channel) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        self.retrying(f).await.map_err(|e| e.map_or_else(|| tonic::Status::cancelled("stopped"), CallError::into_status))
    }

    /// As [`Remote::call`], retrying for `wait` instead of [`RETRY_FOR`] (a bootstrap
    /// waiting for a node that is still starting).
    pub async fn call_for<T, F, Fut>(&self, wait: Duration, f: F) -> Result<T, String>
    where
        F: FnMut(Channel) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        self.retrying_for(wait, f).await.map_err(|e| e.map_or_else(|| "stopped".to_owned(), |e| e.to_string()))
    }

    async fn retrying<T, F, Fut>(&self, f: F) -> Result<T, Option<CallError>>
    where
        F: FnMut(Channel) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        self.retrying_for(RETRY_FOR, f).await
    }

    async fn retrying_for<T, F, Fut>(&self, wait: Duration, f: F) -> Result<T, Option<CallError>>
    where
        F: FnMut(Channel) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let per_attempt = self.transport().options().request_timeout();
        let retry = Retry { policy: RetryPolicy::default(), give_up: tokio::time::Instant::now() + wait, stop: None };
        let shown = |e: &CallError, _: Duration| eprintln!("{e} — retrying");
        self.upstream.call_retrying(|| per_attempt, retry, shown, f).await.map(|c| c.value)
    }

    /// One pass over the endpoints, for a write that must not be sent twice blindly
    /// (its outcome, if it fails on the way, is for the operator to check).
    pub async fn once<T, F, Fut>(&self, f: F) -> Result<T, String>
    where
        F: FnMut(Channel) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let budget = Budget::per_attempt(self.transport().options().request_timeout());
        self.upstream.call(budget, f).await.map(|c| c.value).map_err(|e| e.to_string())
    }
}

/// A connection to one node, now (a Raft port asked for its own metrics).
pub async fn connect(t: &Transport, addr: &str) -> Result<Channel, String> {
    t.connect(addr).await.map_err(|e| e.to_string())
}

/// A client of one node's RaftAdmin port, now.
pub async fn raft_admin(t: &Transport, addr: &str) -> Result<RaftAdminClient<Channel>, String> {
    Ok(RaftAdminClient::new(connect(t, addr).await?))
}

/// A node's own Raft metrics (its RaftAdmin port), asked once under the transport's
/// per-attempt deadline: a node that took the connection and never answers is
/// reported, not waited on.
pub async fn raft_metrics(t: &Transport, addr: &str) -> Result<rpb::MetricsResponse, String> {
    let deadline = t.options().request_timeout();
    let mut admin = raft_admin(t, addr).await?;
    match tokio::time::timeout(deadline, admin.metrics(rpb::MetricsRequest {})).await {
        Ok(answer) => answer.map(tonic::Response::into_inner).map_err(|s| holdfast_rpc::status::one_line(&s)),
        Err(_) => Err(format!("no answer from {addr} within {deadline:?}")),
    }
}

/// Refuses when a member of an old group (`members`: id, Raft address) still answers
/// and follows a leader: that group may still have a quorum, and forming a new one
/// from a copy of it would split it in two. `what` names it ("the registry", "cell
/// east-1").
pub async fn refuse_if_old_group_leads(t: &Transport, what: &str, members: Vec<(u64, String)>) -> Result<(), String> {
    for (id, addr) in members {
        if let Ok(m) = raft_metrics(t, &addr).await {
            if m.has_leader {
                return Err(format!(
                    "member {id} of {what} ({addr}) answers and follows leader {}: {what} may still have a quorum. \
                     Recover only a group whose majority is gone for good; if its members that answer are to be discarded, stop them and run again, \
                     or pass --force-new-group",
                    m.leader_id
                ));
            }
        }
    }
    Ok(())
}

/// Serves `app` on a loopback port for the rest of the process (the fenced test
/// resources of `demo` and `drill`, which worker processes post to); returns its base
/// URL.
pub async fn serve_local(app: axum::Router) -> Result<String, String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    // A local stand-in for a resource, on loopback: plaintext, like the resource it
    // stands in for (the ledger of docs/design.md is not part of holdfast).
    tokio::spawn(async move {
        if let Err(e) = Transport::insecure().serve_http(app, listener, std::future::pending()).await {
            tracing::warn!(error = %e, "the local resource endpoint stopped");
        }
    });
    Ok(format!("http://{addr}"))
}
