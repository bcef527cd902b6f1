//! The Raft-admin commands give up in bounded time with the cause, whatever the node at
//! the other end does (docs/deploy.md): `init` waits for a node that is not up yet
//! for `--wait` and no longer, refuses a malformed address at once, and `cell status`
//! does not hang on a node that takes the connection and never answers.

use std::io::Read;
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_holdfast");

/// Runs `holdfast args --insecure`; kills it if it is still running after `limit`.
/// Returns whether it succeeded, its stderr, and how long it took (`None`: killed).
fn run_within(args: &[&str], limit: Duration) -> (bool, String, Option<Duration>) {
    let started = Instant::now();
    let mut child = Command::new(BIN).args(args).arg("--insecure").env("RUST_LOG", "error").stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if started.elapsed() > limit {
            child.kill().unwrap();
            child.wait().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    (status.is_some_and(|s| s.success()), err, status.map(|_| started.elapsed()))
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn init_waits_for_an_unreachable_node_for_wait_then_names_the_cause() {
    let addr = format!("127.0.0.1:{}", closed_port());
    let member = format!("1={addr},{addr}");
    let (ok, err, took) = run_within(&["registry", "init", "--raft-endpoint", &addr, "--member", &member, "--wait", "3"], Duration::from_secs(30));
    let took = took.unwrap_or_else(|| panic!("init still ran after 30 s with --wait 3: {err}"));
    assert!(!ok, "init succeeded against a closed port: {err}");
    // It stops when the next pause (jittered, at most 2 s) would pass the wait: after
    // at least 1 s of a 3 s wait, and never much after it.
    assert!(took >= Duration::from_secs(1), "init gave up after {took:?}, long before its --wait of 3 s: {err}");
    assert!(took < Duration::from_secs(15), "init took {took:?} with --wait 3: {err}");
    assert!(err.matches("retrying").count() >= 2, "init did not retry (shown on stderr): {err}");
    assert!(err.contains(&addr), "the error does not name the node: {err}");
}

#[test]
fn init_refuses_a_malformed_address_at_once() {
    let (ok, err, took) = run_within(&["cell", "init", "--raft-endpoint", "no-port-here", "--member", "1=127.0.0.1:1,127.0.0.1:2"], Duration::from_secs(30));
    let took = took.unwrap_or_else(|| panic!("init still ran after 30 s on a malformed address: {err}"));
    assert!(!ok, "init accepted a malformed address: {err}");
    assert!(took < Duration::from_secs(5), "a malformed address was retried for {took:?}: {err}");
    assert!(err.contains("--raft-endpoint"), "the error does not name the flag: {err}");
}

#[test]
fn cell_status_gives_up_on_a_node_that_never_answers() {
    // Takes connections (the kernel's backlog) and never reads or writes.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap().to_string();
    let (ok, err, took) = run_within(&["cell", "status", "--raft-endpoint", &addr], Duration::from_secs(30));
    let took = took.unwrap_or_else(|| panic!("cell status still hung after 30 s on a node that never answers: {err}"));
    assert!(!ok, "cell status succeeded against a silent node: {err}");
    // One attempt under the transport's per-attempt deadline (3 s). Without it the
    // call ended only after about 10 s.
    assert!(took < Duration::from_secs(8), "cell status took {took:?}, past the per-attempt deadline: {err}");
    drop(silent);
}
