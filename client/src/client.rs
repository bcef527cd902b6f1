//! [`Client`]: a connection to one cell — any of its nodes — or to gateways, that sends
//! each call to the leader and retries retryable errors with backoff. The
//! leader-following itself is the wire edge's ([`holdfast_rpc::Upstream`]): the node
//! that answered last first, a `NOT_LEADER` hint followed at once, a node that fails
//! tried last for a while.

use crate::error::Error;
use crate::renewals::Renewals;
use crate::session::{Session, SessionOptions};
use holdfast_proto::lock::v1::lock_service_client::LockServiceClient;
use holdfast_rpc::{host_port, Budget, Channel, Hints, Retry, RetryPolicy, Transport, Upstream};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::debug;

/// Settings of a [`Client`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientConfig {
    /// How long one attempt of a call may take before the next node is tried (Acquire
    /// adds its wait timeout). Default 5 s.
    pub request_timeout: Duration,
    /// Backoff and retry budget. Default: 50 ms → 2 s with full jitter, 30 s budget.
    pub retry: RetryPolicy,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig { request_timeout: Duration::from_secs(5), retry: RetryPolicy::default() }
    }
}

/// A connection to one cell (or to a region's gateways). Cheap to clone; clones share
/// connections and the leader guess.
#[derive(Debug, Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: ClientConfig,
    upstream: Upstream,
    /// The sessions' renewal streams, one per shard (`renewals.rs`).
    renewals: Arc<Renewals>,
}

impl Client {
    /// Connects to the cell whose nodes' client addresses are `endpoints` (`host:port`,
    /// a name or an IP), or to gateways. Any one node is enough: calls find the leader
    /// through hints. Fails if none of them accepts a connection.
    pub async fn connect<S: AsRef<str>>(endpoints: &[S]) -> Result<Client, Error> {
        Client::connect_with(endpoints, ClientConfig::default()).await
    }

    /// [`Client::connect`] with explicit settings.
    pub async fn connect_with<S: AsRef<str>>(endpoints: &[S], config: ClientConfig) -> Result<Client, Error> {
        Client::connect_via(&Transport::insecure(), endpoints, config).await
    }

    /// [`Client::connect_with`] over `transport` (its connection pool, limits and,
    /// where configured, TLS), shared with whatever else uses it.
    pub async fn connect_via<S: AsRef<str>>(transport: &Transport, endpoints: &[S], config: ClientConfig) -> Result<Client, Error> {
        let endpoints: Vec<String> =
            endpoints.iter().map(|e| host_port(e.as_ref()).map_err(|e| Error::InvalidArgument(e.to_string()))).collect::<Result<_, _>>()?;
        if endpoints.is_empty() {
            return Err(Error::InvalidArgument("no endpoints given".into()));
        }
        let mut last = String::new();
        let mut reachable = false;
        for e in &endpoints {
            match transport.connect(e).await {
                Ok(_) => {
                    reachable = true;
                    break;
                }
                Err(err) => last = err.to_string(),
            }
        }
        if !reachable {
            return Err(Error::Transport { grpc: tonic::Code::Unavailable, message: format!("no endpoint accepted a connection; last: {last}") });
        }
        let upstream = Upstream::new(transport, endpoints, Hints::Anywhere);
        Ok(Client { inner: Arc::new(Inner { config, upstream, renewals: Arc::default() }) })
    }

    /// Creates a session in the cell and starts renewing it.
    pub async fn create_session(&self, opts: SessionOptions) -> Result<Session, Error> {
        Session::create(self.clone(), opts).await
    }

    pub(crate) fn renewals(&self) -> &Arc<Renewals> {
        &self.inner.renewals
    }

    /// How many renewal streams this client keeps open: one per shard its sessions
    /// renew in (diagnostics and tests).
    pub fn renewal_streams(&self) -> usize {
        self.inner.renewals.open()
    }

    /// How many KeepAlive messages this client has sent: one per batch of its
    /// sessions' renewals that came due together (diagnostics and tests).
    pub fn renewal_messages(&self) -> u64 {
        self.inner.renewals.messages()
    }

    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// The leader-following caller of this client's endpoints.
    pub(crate) fn upstream(&self) -> &Upstream {
        &self.inner.upstream
    }

    /// One pass over the nodes, each attempt bounded by `timeout` and the pass by
    /// `until` (see `holdfast_rpc::Upstream::call`). Returns the answer and when the
    /// attempt that got it was sent.
    pub(crate) async fn attempt<T, F, Fut>(&self, timeout: Duration, until: Instant, mut f: F) -> Result<(T, Instant), Error>
    where
        F: FnMut(LockServiceClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let called = self.inner.upstream.call(Budget::per_attempt(timeout).until(until), |ch| f(LockServiceClient::new(ch))).await?;
        Ok((called.value, called.sent))
    }

    /// Runs `f` against the leader until it succeeds, fails with a non-retryable
    /// error, `give_up` passes, or `stop` fires (then `Err(None)`). Returns the value
    /// and when the successful attempt was sent (for deadlines counted from sending).
    /// `timeout` gives each attempt's bound; `f` is called once per attempt and must
    /// make the same request each time (the same request id).
    pub(crate) async fn call<T, F, Fut>(
        &self,
        what: &'static str,
        give_up: Instant,
        stop: Option<&CancellationToken>,
        timeout: impl FnMut() -> Duration,
        mut f: F,
    ) -> Result<(T, Instant), Option<Error>>
    where
        F: FnMut(LockServiceClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let retry = Retry { policy: self.inner.config.retry, give_up, stop };
        let on_retry = |e: &holdfast_rpc::CallError, delay: Duration| debug!(call = what, error = %e, ?delay, "retrying");
        match self.inner.upstream.call_retrying(timeout, retry, on_retry, |ch| f(LockServiceClient::new(ch))).await {
            Ok(c) => Ok((c.value, c.sent)),
            Err(None) => Err(None),
            Err(Some(e)) => {
                debug!(call = what, error = %e, "giving up");
                Err(Some(e.into()))
            }
        }
    }
}

impl Client {
    /// [`Client::call`] with the default retry budget and no stop token, `req` sent
    /// anew on every attempt in the caller's trace: the shape of most one-off calls.
    pub(crate) async fn unary<Req, T, F, Fut>(&self, what: &'static str, req: Req, f: F) -> Result<(T, Instant), Error>
    where
        Req: Clone,
        F: Fn(LockServiceClient<Channel>, tonic::Request<Req>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let cfg = self.inner.config;
        let give_up = Instant::now() + cfg.retry.give_up_after;
        self.call(what, give_up, None, || cfg.request_timeout, |svc| f(svc, traced(req.clone()))).await.map_err(|e| e.expect("no stop token was given"))
    }
}

/// A request in the trace of the caller's current span, when the application exports
/// traces (`tracing` with an OpenTelemetry layer): the gateway and the cell continue
/// it (docs/observability.md, "Traces"). Without one, a plain request.
pub(crate) fn traced<T>(msg: T) -> tonic::Request<T> {
    holdfast_rpc::CallContext::default().request(msg)
}
