//! holdfast-testkit: helpers shared by the test suites of several crates. A
//! dev-dependency only. It may depend on the registry server but never on the cell
//! server, whose own tests use it.
//!
//! - [`proxy::Proxy`]: a TCP proxy a test can cut, to partition one process's view of
//!   another (a cell from the registry, a gateway from the registry).
//! - [`registry`]: a 3-voter registry in this process.

pub mod proxy;
pub mod registry;
