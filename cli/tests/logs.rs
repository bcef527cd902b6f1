//! Log lines a pipeline can read (issue #17): no terminal colour codes when stderr is
//! not a terminal (a file, a pipe), and `--log-format json` gives one JSON object per
//! line.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_holdfast");

/// The first stderr line of a gateway started with `extra` flags (it warns at once that
/// it runs without TLS), then the gateway is stopped.
fn first_log_line(extra: &[&str]) -> String {
    let mut c = Command::new(BIN);
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("HOLDFAST_") || k == "RUST_LOG") {
        c.env_remove(k);
    }
    let mut child = c
        .args(["gateway", "run", "--insecure", "--region", "east", "--registry", "127.0.0.1:9"])
        .args(["--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start a gateway");
    let err = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let first = BufReader::new(err).lines().map_while(Result::ok).find(|l| !l.trim().is_empty());
        let _ = tx.send(first);
    });
    let line = rx.recv_timeout(Duration::from_secs(20));
    let _ = child.kill();
    let _ = child.wait();
    line.ok().flatten().expect("the gateway logged nothing within 20 s")
}

#[test]
fn logs_to_a_pipe_carry_no_colour_codes() {
    let line = first_log_line(&[]);
    assert!(line.contains("INSECURE"), "{line:?}");
    assert!(!line.contains('\u{1b}'), "terminal escape codes in a piped log line: {line:?}");
}

#[test]
fn json_logs_are_one_object_per_line() {
    let line = first_log_line(&["--log-format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line:?}"));
    assert_eq!(v["level"], "WARN", "{v}");
    assert!(v["message"].as_str().is_some_and(|m| m.contains("INSECURE")), "{v}");
    assert!(v["timestamp"].is_string() && v["target"].is_string(), "{v}");
}
