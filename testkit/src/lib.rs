//! holdfast-testkit: helpers shared by the test suites of several crates. A
//! dev-dependency only, and one that depends on no holdfast crate, so every crate's
//! tests can use it.
//!
//! - [`serial`]: one cluster test at a time within a test binary;
//! - [`proxy::Proxy`]: a TCP proxy a test can cut, to partition one process's view of
//!   another (a cell from the registry, a gateway from the registry);
//! - [`port_block`]: a range of ports reserved machine-wide, for tests that start a
//!   deployment on fixed ports while other test binaries run beside them;
//! - [`rss_bytes`]: a process's resident memory, for tests that bound it;
//! - [`diskfault`]: failed or slow syncs and writes on a real process's data directory
//!   (an `LD_PRELOAD` shim).
//!
//! A test registry is the registry crate's own (`holdfast_registry::testing`, feature
//! `test-support`).

pub mod diskfault;
mod memory;
mod ports;
pub mod proxy;
mod serial;

pub use memory::rss_bytes;
pub use ports::{port_block, PortBlock};
pub use serial::serial;
