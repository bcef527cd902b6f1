//! holdfast-testkit: helpers shared by the test suites of several crates. A
//! dev-dependency only; depends on no holdfast crate, so any suite can use it.
//!
//! - [`proxy::Proxy`]: a TCP proxy a test can cut, to partition one process's view of
//!   another (a cell from the registry, a gateway from the registry).

pub mod proxy;
