//! [`Transport`]: how this process opens connections and serves them — the one place
//! that decides timeouts, HTTP/2 keepalive, message and concurrency limits and
//! TCP_NODELAY for every channel and every listener.
//!
//! Servers read its options from their config file (`[transport]`, `[tls]`), callers
//! build one per process and share it: channels are pooled per address inside it, so the
//! SDK, the gateway and the Raft network each keep one HTTP/2 connection per peer.
//! With certificates ([`Security::Tls`]) every channel and every listener speaks mutual
//! TLS; without, plaintext — which a server only does when told `--insecure`.

use crate::connect::Connector;
use crate::net::{Listener, SharedNetwork};
use crate::serve::{self, GrpcRouter, GrpcServer};
use crate::tls::{Identity, Security};
use crate::trace::ServerSpans;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tonic::transport::{Channel, Endpoint};

/// How long a channel's HTTP/2 connection remembers a stream it cancelled: longer than
/// any process runs, so only the count (h2 keeps the last 50) forgets one.
const RESET_STREAM_REMEMBERED: Duration = Duration::from_secs(24 * 3600);

/// Transport settings. Every field has a default; a config file's `[transport]`
/// section (or `HOLDFAST_TRANSPORT__<FIELD>`) overrides them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TransportOptions {
    /// Longest time to open a connection (TCP, and TLS where it is on), ms. Default 1000.
    pub connect_timeout_ms: u64,
    /// Default bound of one attempt of a unary call, ms: a caller that hears nothing
    /// in this time tries another member. Calls that wait (a queued acquire) add their
    /// wait. Default 3000.
    pub request_timeout_ms: u64,
    /// HTTP/2 keepalive: a ping on every connection this often, ms. Default 5000.
    pub keepalive_interval_ms: u64,
    /// A peer that does not answer a keepalive ping in this time is dropped, ms.
    /// Default 5000.
    pub keepalive_timeout_ms: u64,
    /// Largest gRPC message a server accepts or sends, bytes. Default 4 MiB. (The Raft
    /// port takes its own, larger bound for log batches and snapshot chunks.)
    pub max_message_bytes: usize,
    /// Most requests one connection may have in flight at a server; more wait.
    /// Default 1024.
    pub max_concurrent_streams: u32,
}

impl Default for TransportOptions {
    fn default() -> Self {
        TransportOptions {
            connect_timeout_ms: 1000,
            request_timeout_ms: 3000,
            keepalive_interval_ms: 5000,
            keepalive_timeout_ms: 5000,
            max_message_bytes: 4 << 20,
            max_concurrent_streams: 1024,
        }
    }
}

impl TransportOptions {
    /// Catches settings that cannot work.
    pub fn validate(&self) -> Result<(), String> {
        let positive = [
            ("connect_timeout_ms", self.connect_timeout_ms),
            ("request_timeout_ms", self.request_timeout_ms),
            ("keepalive_interval_ms", self.keepalive_interval_ms),
            ("keepalive_timeout_ms", self.keepalive_timeout_ms),
            ("max_message_bytes", self.max_message_bytes as u64),
            ("max_concurrent_streams", u64::from(self.max_concurrent_streams)),
        ];
        for (name, v) in positive {
            if v == 0 {
                return Err(format!("transport.{name} must be positive"));
            }
        }
        if self.max_message_bytes > 1 << 30 {
            return Err(format!("transport.max_message_bytes {} exceeds 1 GiB", self.max_message_bytes));
        }
        Ok(())
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }
}

/// An address that cannot be dialled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad address {addr:?}: {why}")]
pub struct AddressError {
    pub addr: String,
    pub why: String,
}

/// A connection that could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error(transparent)]
    Address(#[from] AddressError),
    #[error("cannot reach {addr}: {why}")]
    Unreachable { addr: String, why: String },
}

/// `host:port` — a DNS name or an IP — from what a user or a config gave: a scheme
/// (`http://`, `https://`) and a trailing slash are dropped; the transport, not the
/// address, decides how to speak.
pub fn host_port(addr: &str) -> Result<String, AddressError> {
    let bad = |why: &str| AddressError { addr: addr.to_owned(), why: why.to_owned() };
    let a = addr.trim();
    let a = a.strip_prefix("http://").or_else(|| a.strip_prefix("https://")).unwrap_or(a).trim_end_matches('/');
    let (host, port) = a.rsplit_once(':').ok_or_else(|| bad("expected host:port"))?;
    if host.is_empty() {
        return Err(bad("the host is empty"));
    }
    if port.parse::<u16>().is_err() {
        return Err(bad("the port is not a number below 65536"));
    }
    let bracketed = host.starts_with('[') && host.ends_with(']');
    let ok_chars = host.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
    if !bracketed && !ok_chars {
        return Err(bad("the host is neither a DNS name nor an IP address"));
    }
    Ok(a.to_owned())
}

/// The transport of one process. Cheap to clone; clones share the channel pool.
#[derive(Clone)]
pub struct Transport {
    inner: Arc<Inner>,
}

struct Inner {
    options: TransportOptions,
    security: Security,
    /// `None`: the OS's TCP. Otherwise the network every channel dials and every
    /// listener is expected to come from ([`crate::net`]).
    network: Option<SharedNetwork>,
    /// Ordered, so the connections close in one order when the transport drops (a
    /// simulation replays it; docs/simulation.md).
    channels: Mutex<BTreeMap<String, Channel>>,
}

impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transport").field("options", &self.inner.options).field("tls", &self.inner.security.is_tls()).finish_non_exhaustive()
    }
}

impl Transport {
    pub fn new(options: TransportOptions, security: Security) -> Transport {
        Transport { inner: Arc::new(Inner { options, security, network: None, channels: Mutex::new(BTreeMap::new()) }) }
    }

    /// A plaintext transport over another network than the OS's (the simulation's,
    /// [`crate::net`]): every channel dials through `network`.
    pub fn over(options: TransportOptions, network: SharedNetwork) -> Transport {
        Transport { inner: Arc::new(Inner { options, security: Security::Insecure, network: Some(network), channels: Mutex::new(BTreeMap::new()) }) }
    }

    /// Plaintext with default options: for tests, and servers run `--insecure`.
    pub fn insecure() -> Transport {
        Transport::new(TransportOptions::default(), Security::Insecure)
    }

    pub fn options(&self) -> &TransportOptions {
        &self.inner.options
    }

    pub fn security(&self) -> &Security {
        &self.inner.security
    }

    /// The identity this process's certificate names (`None` without TLS).
    pub fn identity(&self) -> Option<Identity> {
        match &self.inner.security {
            Security::Tls(m) => m.identity(),
            Security::Insecure => None,
        }
    }

    fn endpoint(&self, addr: &str) -> Result<Endpoint, AddressError> {
        let hp = host_port(addr)?;
        let o = &self.inner.options;
        // The connector decides how to speak (TLS or not); the scheme is only what the
        // HTTP/2 requests say, and it is `http` even over TLS. tonic, once anything in
        // the same build turns on one of its own TLS features (an application that also
        // uses etcd-client with TLS, as holdfast-bench does), refuses to dial an `https`
        // URI whose TLS it does not do itself: every call would fail with "Connecting to
        // HTTPS without TLS enabled".
        let e = Endpoint::from_shared(format!("http://{hp}")).map_err(|e| AddressError { addr: addr.to_owned(), why: e.to_string() })?;
        Ok(e.connect_timeout(Duration::from_millis(o.connect_timeout_ms))
            .http2_keep_alive_interval(Duration::from_millis(o.keepalive_interval_ms))
            .keep_alive_timeout(Duration::from_millis(o.keepalive_timeout_ms))
            .keep_alive_while_idle(true)
            // hyper's HTTP/2 client counts, over a connection's whole life, the resets it
            // sends for frames of streams it already cancelled and forgot (a trailer
            // arriving after a renewal stream or a Watch was dropped), and at 1,024 closes
            // the connection with GOAWAY(ENHANCE_YOUR_CALM), failing every call on it. A
            // gateway's pooled connection to a cell cancels streams whenever its callers
            // do, so it died every few seconds under 10,000 renewing sessions. The limit
            // guards a client against a hostile server; ours are holdfast's own peers
            // (authenticated under TLS), so it is lifted. Servers keep their limits.
            // (gateway/tests/gateway.rs, cancelled_streams_...)
            .http2_max_local_error_reset_streams(None)
            // A cancelled stream is remembered (so a late frame for it is dropped without
            // a reset in answer) for as long as it is among the last few cancelled: by
            // count, never by time. h2 would forget it after one second of the machine's
            // clock, which the deterministic simulation does not control: whether a late
            // answer on a dropped replication stream drew a reset then depended on how
            // fast the machine ran, and a seed's history with it (docs/simulation.md).
            .http2_reset_stream_duration(RESET_STREAM_REMEMBERED))
    }

    fn connector(&self) -> Connector {
        Connector { security: self.inner.security.clone(), network: self.inner.network.clone() }
    }

    /// The pooled channel to `addr`: connects on first use and reconnects by itself
    /// after a failure, so a caller may hold it across a peer's restart.
    pub fn channel(&self, addr: &str) -> Result<Channel, AddressError> {
        let key = host_port(addr)?;
        let mut channels = self.inner.channels.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = channels.get(&key) {
            return Ok(c.clone());
        }
        let c = self.endpoint(&key)?.connect_with_connector_lazy(self.connector());
        channels.insert(key, c.clone());
        Ok(c)
    }

    /// A new channel to `addr`, connected now: fails at once when nobody answers
    /// there (for commands that should say so rather than wait).
    pub async fn connect(&self, addr: &str) -> Result<Channel, ConnectError> {
        let e = self.endpoint(addr)?;
        e.connect_with_connector(self.connector()).await.map_err(|err| ConnectError::Unreachable { addr: addr.to_owned(), why: source_chain(&err) })
    }

    /// A raw stream to `addr` (an HTTP request by hand: a readiness probe).
    pub async fn stream(&self, addr: &str) -> Result<crate::connect::ClientIo, ConnectError> {
        let hp = host_port(addr)?;
        let (host, port) = hp.rsplit_once(':').expect("host_port checked it");
        let port: u16 = port.parse().expect("host_port checked it");
        let work = crate::connect::connect(&self.inner.security, self.inner.network.as_ref(), host, port);
        match tokio::time::timeout(Duration::from_millis(self.inner.options.connect_timeout_ms), work).await {
            Ok(Ok(io)) => Ok(io),
            Ok(Err(e)) => Err(ConnectError::Unreachable { addr: addr.to_owned(), why: e.to_string() }),
            Err(_) => Err(ConnectError::Unreachable { addr: addr.to_owned(), why: "connect timed out".into() }),
        }
    }

    /// A gRPC server with this transport's limits, inside the cluster: calls that come
    /// with a trace continue it ([`crate::trace`]). Add services, then
    /// [`Transport::serve_grpc`].
    pub fn grpc_server(&self) -> GrpcServer {
        self.grpc_server_with(ServerSpans::internal())
    }

    /// A gRPC server at a front door (a gateway's): every call is traced, and
    /// `observer` sees each answer.
    pub fn grpc_front_door(&self, observer: crate::trace::Observer) -> GrpcServer {
        self.grpc_server_with(ServerSpans::front_door(observer))
    }

    fn grpc_server_with(&self, spans: ServerSpans) -> GrpcServer {
        let o = &self.inner.options;
        tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(Duration::from_millis(o.keepalive_interval_ms)))
            .http2_keepalive_timeout(Some(Duration::from_millis(o.keepalive_timeout_ms)))
            .max_concurrent_streams(o.max_concurrent_streams)
            // Bounded header blocks: a request's metadata is small.
            .http2_max_header_list_size(64 * 1024)
            .layer(spans)
    }

    /// Serves `router` on `listener` until `shutdown` completes, then drains the
    /// calls in flight (the caller bounds that with its own deadline).
    /// With TLS, every caller must present a client certificate of the cluster's CA.
    pub async fn serve_grpc(
        &self,
        router: GrpcRouter,
        listener: impl Into<Listener>,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), tonic::transport::Error> {
        router.serve_with_incoming_shutdown(serve::incoming(listener.into(), &self.inner.security, true), shutdown).await
    }

    /// Serves an HTTP `router` on `listener` until `shutdown` completes. Handlers may
    /// extract `ConnectInfo<Peer>`.
    pub async fn serve_http(
        &self,
        router: axum::Router,
        listener: impl Into<Listener>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        serve::http(router, listener.into(), &self.inner.security, shutdown).await
    }
}

/// An error with its causes, on one line (tonic's transport errors hide the cause).
pub(crate) fn source_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// Applies this transport's message bound to a generated tonic server:
/// `bounded!(LockServiceServer::new(api), transport)`.
#[macro_export]
macro_rules! bounded {
    ($svc:expr, $transport:expr) => {{
        let max = $transport.options().max_message_bytes;
        $svc.max_decoding_message_size(max).max_encoding_message_size(max)
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_host_port_with_names_or_ips() {
        assert_eq!(host_port("127.0.0.1:7001").unwrap(), "127.0.0.1:7001");
        assert_eq!(host_port("http://127.0.0.1:7001/").unwrap(), "127.0.0.1:7001");
        assert_eq!(host_port("cell-1.east.svc.cluster.local:7001").unwrap(), "cell-1.east.svc.cluster.local:7001");
        assert_eq!(host_port("[::1]:7001").unwrap(), "[::1]:7001");
        for bad in ["", "7001", ":7001", "host:", "host:99999", "host name:1", "a/b:1"] {
            assert!(host_port(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn channels_are_pooled_per_address() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let t = Transport::insecure();
            t.channel("127.0.0.1:1").unwrap();
            t.channel("http://127.0.0.1:1").unwrap();
            assert_eq!(t.inner.channels.lock().unwrap().len(), 1);
            assert!(t.channel("nowhere").is_err());
        });
    }

    #[test]
    fn zero_limits_are_refused() {
        assert!(TransportOptions::default().validate().is_ok());
        let e = TransportOptions { max_message_bytes: 0, ..Default::default() }.validate().unwrap_err();
        assert!(e.contains("max_message_bytes"), "{e}");
    }
}
