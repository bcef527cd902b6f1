//! One cluster test at a time: on 2 cores, clusters that run in parallel starve each
//! other's heartbeats and elect for no reason. Every cluster test holds the guard of
//! [`serial`] for its whole run, across awaits (it is an async mutex, which may be
//! held there), and logs through the test writer.

use tokio::sync::{Mutex, MutexGuard};

static SERIAL: Mutex<()> = Mutex::const_new(());

/// Waits for the other cluster tests of this binary to finish; the test runs while the
/// guard lives. Also installs the log subscriber (`RUST_LOG`, default `info` with
/// openraft's own chatter at `warn`), whose output the harness shows on failure.
pub async fn serial() -> MutexGuard<'static, ()> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,openraft=warn".into()))
        .with_test_writer()
        .try_init();
    SERIAL.lock().await
}
