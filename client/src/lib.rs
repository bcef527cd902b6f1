//! holdfast-client: the SDK for holdfast's lock API (`proto/holdfast/lock/v1`).
//!
//! What lives here:
//! - [`Client`]: a connection to one cell (any node) or to gateways, over a
//!   [`Transport`] (connection pool, limits), with the wire edge's leader-following
//!   (`NOT_LEADER` hints, the next node on a transport error) and retries by
//!   exponential backoff and full jitter ([`RetryPolicy`], 50 ms → 2 s);
//! - [`Session`]: a lease renewed every TTL/3 by a background task, which reports
//!   itself lost ([`Session::lost`], [`Session::loss_token`], [`Session::is_lost`])
//!   when no renewal has been confirmed within 2/3 of the TTL — before the cell can
//!   expire it — and which stops renewing when the worker stops reporting progress
//!   ([`SessionOptions::progress_timeout`], [`Session::progress`]);
//! - [`Lock`]: a hold with its [`FencingToken`], released explicitly or on drop, and
//!   lost with its session;
//! - [`Election`]: leader election on a lock (campaign, leader, resign by release),
//!   the leader fenced by its token;
//! - [`OwnershipCache`]: a namespace's shard owners from memory, listed then watched
//!   from the listed revision, resuming after a broken watch;
//! - the SDK's metrics: `lock_lease_expired_while_held_total{ns}`,
//!   `lock_renew_failures_total{ns}`, `lock_hold_time_seconds{ns}`.
//!
//! What does not: the fencing check itself (the resource's: `holdfast-fence`, kept
//! out of this crate so RocksDB never reaches a client), the gateway's routing, how bytes travel (`holdfast-rpc`), and anything of the servers. `docs/sdk.md` says how to use it.
//!
//! ```no_run
//! # async fn run() -> Result<(), holdfast_client::Error> {
//! use holdfast_client::{AcquireOptions, Client, SessionOptions};
//! use std::time::Duration;
//!
//! let client = Client::connect(&["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"]).await?;
//! let session = client
//!     .create_session(SessionOptions::new("payments", "default", Duration::from_secs(10)).progress_timeout(Duration::from_secs(10)))
//!     .await?;
//! let lock = session.acquire("settle:2026-10-01", AcquireOptions::new().wait(Duration::from_secs(30))).await?;
//! for step in 0..10 {
//!     lock.check()?; // stop if the lease is lost
//!     // ... write to the resource with lock.token() ...
//!     session.progress();
//! #   let _ = step;
//! }
//! lock.release().await?;
//! # Ok(()) }
//! ```

mod client;
mod election;
mod error;
mod keeper;
mod lock;
mod ownership;
mod renewals;
mod session;

pub use client::{Client, ClientConfig};
pub use election::{Election, Leader};
pub use error::{Error, LossReason};
pub use holdfast_rpc::{RetryPolicy, Transport, TransportOptions};
pub use keeper::SessionKeeper;
pub use lock::Lock;
pub use ownership::{Owner, OwnershipCache, OwnershipChange};
pub use session::{AcquireOptions, Session, SessionOptions};

pub use holdfast_core::{ErrorCode, FencingToken, LockName, Mode, SessionId, ShardKey};
pub use tokio_util::sync::CancellationToken;
