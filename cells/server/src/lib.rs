//! holdfast-cell: the cell server. Thin glue between the pure lock table
//! (`holdfast-cell-state`), the Raft substrate (`holdfast-raft`) and the lock API
//! (`holdfast-proto`).
//!
//! What lives here: the leader's state for one term ([`term`]: its lease clock
//! ([`clock`]), volatile table, wake-ups and ownership lease) and its duties
//! ([`leader`]), the hooks that feed it and Watch from the log ([`machine`]), the
//! registry follower ([`follow`], [`ownership`]), the LockService and
//! CellAdmin handlers, the node's configuration and its lifecycle ([`CellServer`]).
//! What does not: lock semantics (the state crate), Raft storage and transport (the
//! raft crate), error-code tables (core).

pub mod admin;
pub mod cell;
pub mod clock;
pub mod config;
pub mod convert;
pub mod follow;
pub mod leader;
pub mod machine;
pub mod metrics;
pub mod ownership;
pub mod recover;
pub mod server;
pub mod service;
pub mod term;

pub use config::CellConfig;
pub use server::CellServer;
