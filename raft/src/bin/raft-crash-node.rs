//! Test helper for `tests/crash.rs`, not an operator tool: a single-node Raft group on
//! RocksDB that either writes numbered commands forever, printing `ACK <value> <index>`
//! after each one is committed, or recovers and prints the values it holds.
//!
//! Usage: `raft-crash-node write <dir>` | `raft-crash-node verify <dir>`

use std::io::{self, Write};
use std::process::ExitCode;
use std::time::Duration;

use holdfast_raft::{NodeConfig, RaftNode, ReplicatedState};

/// Append-only list of u64 (the crate's test state machine is behind a feature this
/// binary does not enable).
#[derive(Default)]
struct Values(Vec<u64>);

impl ReplicatedState for Values {
    fn apply(&mut self, _log_index: u64, payload: &[u8]) -> io::Result<Vec<u8>> {
        if let Ok(a) = <[u8; 8]>::try_from(payload) {
            self.0.push(u64::from_be_bytes(a));
        }
        Ok(Vec::new())
    }
    fn snapshot(&self) -> Vec<u8> {
        self.0.iter().flat_map(|v| v.to_be_bytes()).collect()
    }
    fn restore(&mut self, data: &[u8]) -> io::Result<()> {
        if !data.len().is_multiple_of(8) {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "bad snapshot"));
        }
        self.0 = data.chunks_exact(8).map(|c| u64::from_be_bytes(c.try_into().expect("8"))).collect();
        Ok(())
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(mode), Some(dir)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: raft-crash-node write|verify <dir>");
        return ExitCode::from(2);
    };
    match run(mode, dir).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("raft-crash-node: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(mode: &str, dir: &str) -> Result<(), Box<dyn std::error::Error>> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let mut cfg = NodeConfig::new(1, "crash", dir);
    cfg.timings.heartbeat_ms = 50;
    cfg.timings.election_min_ms = 150;
    cfg.timings.election_max_ms = 300;
    // Snapshots and purges happen during the run, so recovery covers snapshot + log.
    cfg.timings.snapshot_every_logs = 50;
    cfg.timings.logs_kept_after_snapshot = 10;
    let node = RaftNode::start(cfg, listener, Values::default()).await?;
    let fresh = !node.raft().is_initialized().await?;
    if fresh {
        node.initialize([(1, node.node().clone())].into()).await?;
    }
    // Whatever this node acknowledged before a crash must be back before it serves.
    node.wait_for_recovery(Duration::from_secs(20)).await?;
    let mut out = io::stdout().lock();
    match mode {
        "write" => {
            let start = node.state().read(|s| s.0.last().map_or(0, |v| v + 1));
            writeln!(out, "READY {start}")?;
            out.flush()?;
            for v in start.. {
                let applied = node.write(v.to_be_bytes().to_vec()).await?;
                writeln!(out, "ACK {v} {}", applied.index)?;
                out.flush()?;
            }
            Ok(())
        }
        "verify" => {
            let values = node.state().read(|s| s.0.clone());
            let list: Vec<String> = values.iter().map(|v| v.to_string()).collect();
            writeln!(out, "VALUES {}", list.join(","))?;
            out.flush()?;
            drop(out);
            node.shutdown().await;
            Ok(())
        }
        other => Err(format!("unknown mode {other}").into()),
    }
}
