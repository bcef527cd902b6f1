//! holdfast-gateway: one stateless front door per region.
//!
//! It keeps a cached view of placement fresh through the registry's ownership watch
//! (`placement`), sends each call to the leader of its shard's cell with the epoch it
//! believes in (`route`: `STALE_EPOCH` → refresh and retry once;
//! `holdfast_client::upstream`: one `NOT_LEADER` hint followed), limits acquires per
//! namespace (`limits`), applies the
//! namespace's failure posture when the cell cannot be reached (`gateway`), and serves
//! it all over gRPC (`grpc`, with health and reflection) and HTTP/JSON (`http`), each
//! call counted and traced at the door (`door`); and `/status`, a page to watch a
//! deployment by (`status`).
//!
//! What does not live here: any lock state (the cells'), any placement decision (the
//! registry's). Client crates only: openraft and RocksDB never reach this crate.

pub mod access;
pub mod config;
pub mod door;
pub mod gateway;
pub mod grpc;
pub mod http;
pub mod limits;
pub mod placement;
pub mod route;
pub mod server;
pub mod status;

pub use config::GatewayConfig;
pub use server::GatewayServer;
