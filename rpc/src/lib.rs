//! holdfast-rpc: the wire edge — everything about how bytes leave and enter a holdfast
//! process, in one crate below the servers and the SDK.
//!
//! What lives here:
//! - [`Transport`]: the one transport configuration ([`TransportOptions`]: timeouts,
//!   HTTP/2 keepalive, message and concurrency limits) with the channel pool every
//!   caller uses and the gRPC and HTTP server builders every listener uses
//!   ([`serve`]: the accept loop, TCP_NODELAY, [`Peer`]);
//! - [`status`]: the metadata keys and the one way a holdfast error is written into
//!   and read out of a gRPC status;
//! - [`CallContext`]: who calls, until when, in which trace — read at the door,
//!   passed on to every call made for the caller;
//! - [`Upstream`]: the one leader-following caller, with typed failures and retries
//!   ([`retry`]);
//! - [`bearer`]: bearer tokens, for callers without a client certificate;
//! - [`tls`]: mutual TLS — the certificates a process presents and trusts, reloaded
//!   without a restart, and the [`Identity`] a peer's certificate proves;
//! - [`Tasks`]: a server's named background tasks under its shutdown;
//! - [`trace`]: the W3C trace context read at the door into the span serving a call,
//!   and carried on every call made for it.
//!
//! What does not: any service's semantics, protobuf types (`holdfast-proto`), openraft
//! or RocksDB. Nothing outside this crate builds a channel or a server: a test in
//! `rpc/tests/wire_edge.rs` fails when one does.

pub mod auth;
pub mod bearer;
#[cfg(feature = "certgen")]
pub mod certs;
pub mod coalesce;
pub mod connect;
pub mod context;
pub mod entropy;
pub mod net;
pub mod retry;
pub mod serve;
pub mod status;
pub mod tasks;
pub mod tls;
pub mod trace;
pub mod transport;
pub mod upstream;

pub use bearer::BearerToken;
pub use context::CallContext;
pub use retry::{Backoff, RetryPolicy};
pub use serve::{GrpcRouter, GrpcServer, Peer};
pub use status::{status, Answer};
pub use tasks::Tasks;
pub use tls::{CertFiles, Identity, Security, TlsMaterial, TlsOptions};
pub use transport::{host_port, AddressError, ConnectError, Transport, TransportOptions};
pub use upstream::{Budget, CallError, Called, Hints, Retry, Upstream};

pub use tokio_util::sync::CancellationToken;
pub use tonic::transport::Channel;
