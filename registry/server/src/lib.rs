//! holdfast-registry: the registry server. Thin glue between the pure ownership map
//! (`holdfast-registry-state`), the Raft substrate (`holdfast-raft`) and the
//! RegistryService of `holdfast-proto`.
//!
//! What lives here: the ownership leases the leader grants cells ([`leases`]) and the
//! leader duty that completes unplanned moves once a source's lease has run out
//! ([`leader`]), the broadcast that feeds WatchOwnership ([`machine`]), the
//! RegistryService handlers, the node's configuration and its lifecycle
//! ([`RegistryServer`]). What does not: placement rules (the state crate), Raft storage
//! and transport (the raft crate), error-code tables (core).

pub mod config;
pub mod convert;
pub mod leader;
pub mod leases;
pub mod machine;
pub mod metrics;
pub mod recover;
pub mod registry;
pub mod server;
pub mod service;
#[cfg(feature = "test-support")]
pub mod testing;

pub use config::RegistryConfig;
pub use server::RegistryServer;
