//! [`Client`]: a connection to one cell — any of its nodes — that sends each call to
//! the leader (following the `holdfast-leader` hint on `NOT_LEADER`, trying the next
//! node on a transport error) and retries retryable errors with backoff.

use crate::error::{classify, Error};
use crate::retry::{Backoff, RetryPolicy};
use crate::session::{Session, SessionOptions};
use holdfast_core::ErrorCode;
use holdfast_proto::lock::v1::lock_service_client::LockServiceClient;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Channel, Endpoint};
use tracing::debug;

/// Settings of a [`Client`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientConfig {
    /// How long one attempt of a call may take before it counts as a transport error
    /// and is retried (Acquire adds its wait timeout). Default 5 s.
    pub request_timeout: Duration,
    /// How long opening a connection to a node may take. Default 1 s.
    pub connect_timeout: Duration,
    /// Backoff and retry budget. Default: 50 ms → 2 s with full jitter, 30 s budget.
    pub retry: RetryPolicy,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig { request_timeout: Duration::from_secs(5), connect_timeout: Duration::from_secs(1), retry: RetryPolicy::default() }
    }
}

/// A connection to one cell. Cheap to clone; clones share connections and the
/// leader guess.
#[derive(Debug, Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// `http://host:port` of every node the caller named.
    endpoints: Vec<String>,
    config: ClientConfig,
    /// One lazily connected channel per node ever used (named or hinted).
    channels: Mutex<HashMap<String, Channel>>,
    route: Mutex<Route>,
}

/// Where the next call goes: the hinted leader if any, else the next named node.
#[derive(Debug, Default)]
struct Route {
    leader: Option<String>,
    next: usize,
}

/// What the retry loop does after a failed attempt.
pub(crate) enum Next {
    /// A fresh leader hint was followed: try again at once.
    Now,
    Backoff,
}

fn normalize(addr: &str) -> String {
    let a = addr.trim().trim_end_matches('/');
    if a.contains("://") {
        a.to_owned()
    } else {
        format!("http://{a}")
    }
}

impl Client {
    /// Connects to the cell whose nodes' client addresses are `endpoints`
    /// (`host:port` or `http://host:port`). Any one node is enough: calls find the
    /// leader through hints. Fails if none of them accepts a connection.
    pub async fn connect<S: AsRef<str>>(endpoints: &[S]) -> Result<Client, Error> {
        Client::connect_with(endpoints, ClientConfig::default()).await
    }

    /// [`Client::connect`] with explicit settings.
    pub async fn connect_with<S: AsRef<str>>(endpoints: &[S], config: ClientConfig) -> Result<Client, Error> {
        let endpoints: Vec<String> = endpoints.iter().map(|e| normalize(e.as_ref())).collect();
        if endpoints.is_empty() {
            return Err(Error::InvalidArgument("no endpoints given".into()));
        }
        let client = Client { inner: Arc::new(Inner { endpoints, config, channels: Mutex::new(HashMap::new()), route: Mutex::new(Route::default()) }) };
        let mut last = String::new();
        for (i, uri) in client.inner.endpoints.iter().enumerate() {
            let endpoint = client.endpoint(uri)?;
            match endpoint.connect().await {
                Ok(ch) => {
                    client.inner.channels.lock().expect("channels lock").insert(uri.clone(), ch);
                    client.inner.route.lock().expect("route lock").next = i;
                    return Ok(client);
                }
                Err(e) => last = format!("{uri}: {e}"),
            }
        }
        Err(Error::Transport { grpc: tonic::Code::Unavailable, message: format!("no endpoint accepted a connection; last: {last}") })
    }

    /// Creates a session in the cell and starts renewing it.
    pub async fn create_session(&self, opts: SessionOptions) -> Result<Session, Error> {
        Session::create(self.clone(), opts).await
    }

    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    fn endpoint(&self, uri: &str) -> Result<Endpoint, Error> {
        Ok(Endpoint::from_shared(uri.to_owned())
            .map_err(|e| Error::InvalidArgument(format!("bad endpoint {uri:?}: {e}")))?
            .connect_timeout(self.inner.config.connect_timeout)
            .tcp_nodelay(true))
    }

    /// The node the next call goes to, and a client for it.
    pub(crate) fn current(&self) -> Result<(String, LockServiceClient<Channel>), Error> {
        let uri = {
            let route = self.inner.route.lock().expect("route lock");
            route.leader.clone().unwrap_or_else(|| self.inner.endpoints[route.next % self.inner.endpoints.len()].clone())
        };
        let mut channels = self.inner.channels.lock().expect("channels lock");
        let channel = match channels.get(&uri) {
            Some(c) => c.clone(),
            None => {
                let c = self.endpoint(&uri)?.connect_lazy();
                channels.insert(uri.clone(), c.clone());
                c
            }
        };
        Ok((uri, LockServiceClient::new(channel)))
    }

    /// Learns from a failed, retryable attempt at `uri` where the next one should go.
    fn reroute(&self, uri: &str, error: &Error, hint: Option<&str>, hops: &mut u32) -> Next {
        let mut route = self.inner.route.lock().expect("route lock");
        if let Some(hint) = hint.map(normalize).filter(|h| h != uri) {
            debug!(from = uri, to = %hint, "following the leader hint");
            route.leader = Some(hint);
            // One immediate hop per hint; a second NOT_LEADER in a row backs off, so
            // two nodes with stale views cannot bounce a call between them.
            if *hops == 0 {
                *hops = 1;
                return Next::Now;
            }
            *hops = 0;
            return Next::Backoff;
        }
        *hops = 0;
        // A node that is down, or that knows no leader: try the next one. (MOVING and
        // RATE_LIMITED are about the shard, not the node: same node, after a backoff.)
        let elsewhere = matches!(error, Error::Transport { .. }) || matches!(error.code(), Some(ErrorCode::NotLeader | ErrorCode::Unavailable));
        // Another call may already have found the new leader: keep that.
        if elsewhere && route.leader.as_deref().is_none_or(|l| l == uri) {
            // Round-robin over the named nodes, whichever node failed: a follower that
            // still hints at a dead leader must not trap calls between the two of them.
            route.leader = None;
            route.next = (route.next + 1) % self.inner.endpoints.len();
        }
        Next::Backoff
    }

    /// `uri` answered: the next calls go there.
    fn confirm(&self, uri: &str) {
        self.inner.route.lock().expect("route lock").leader = Some(uri.to_owned());
    }

    /// One attempt of a call at the current node, bounded by `timeout`. On failure,
    /// the route is updated and the error returned with what to do next.
    pub(crate) async fn attempt<T, F, Fut>(&self, timeout: Duration, f: &mut F, hops: &mut u32) -> Result<T, (Error, Next)>
    where
        F: FnMut(LockServiceClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let (uri, svc) = self.current().map_err(|e| (e, Next::Backoff))?;
        let (error, hint) = match tokio::time::timeout(timeout, f(svc)).await {
            Ok(Ok(r)) => {
                self.confirm(&uri);
                *hops = 0;
                return Ok(r.into_inner());
            }
            Ok(Err(status)) => {
                let c = classify(&status);
                (c.error, c.leader_hint)
            }
            Err(_) => (Error::per_attempt_timeout(timeout), None),
        };
        let next = if error.is_retryable() { self.reroute(&uri, &error, hint.as_deref(), hops) } else { Next::Backoff };
        Err((error, next))
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
        mut timeout: impl FnMut() -> Duration,
        mut f: F,
    ) -> Result<(T, Instant), Option<Error>>
    where
        F: FnMut(LockServiceClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let never = CancellationToken::new();
        let stop = stop.unwrap_or(&never);
        let mut backoff = Backoff::new(self.inner.config.retry);
        let mut hops = 0;
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let sent = Instant::now();
            let outcome = tokio::select! {
                biased;
                _ = stop.cancelled() => return Err(None),
                r = self.attempt(timeout(), &mut f, &mut hops) => r,
            };
            let (error, next) = match outcome {
                Ok(v) => return Ok((v, sent)),
                Err(e) => e,
            };
            if !error.is_retryable() {
                return Err(Some(error));
            }
            let delay = match next {
                Next::Now => Duration::ZERO,
                Next::Backoff => backoff.next_delay(),
            };
            if Instant::now() + delay >= give_up {
                debug!(call = what, attempts, error = %error, "giving up");
                return Err(Some(error));
            }
            debug!(call = what, attempt = attempts, error = %error, ?delay, "retrying");
            tokio::select! {
                biased;
                _ = stop.cancelled() => return Err(None),
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::normalize;

    #[test]
    fn addresses_become_uris() {
        assert_eq!(normalize("127.0.0.1:7001"), "http://127.0.0.1:7001");
        assert_eq!(normalize("http://127.0.0.1:7001/"), "http://127.0.0.1:7001");
    }
}
