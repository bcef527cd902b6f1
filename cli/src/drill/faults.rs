//! `holdfast drill fault`: faults on a running playground's real processes, found
//! through `endpoints.json`. Each is a plain OS action an SRE could type by hand:
//! `kill -KILL`, `kill -STOP`/`-CONT`, `bridge link set dev <port> state 0|3`, and
//! SIGHUP to `holdfast dev` to restart what exited.
//!
//! A wall-clock step (libfaketime) needs the node restarted under `LD_PRELOAD`; it is
//! exercised on real nodes by `cli/tests/processes.rs`, not from here.

use super::playground::{channel, Node, Playground};
use clap::Subcommand;
use holdfast_proto::raft::v1 as raftpb;
use holdfast_proto::raft::v1::raft_admin_client::RaftAdminClient;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, Subcommand)]
pub enum FaultCmd {
    /// SIGKILL a cell's Raft leader (the others elect a new one).
    ///
    /// Example: holdfast drill fault kill-leader --data-dir /tmp/hf --cell west-1
    KillLeader {
        #[arg(long, env = "HOLDFAST_PLAYGROUND")]
        data_dir: PathBuf,
        #[arg(long)]
        cell: String,
    },
    /// SIGKILL every process of a region: gateway, registry voter, cell nodes.
    ///
    /// Example: holdfast drill fault kill-region --data-dir /tmp/hf --region south
    KillRegion {
        #[arg(long, env = "HOLDFAST_PLAYGROUND")]
        data_dir: PathBuf,
        #[arg(long)]
        region: String,
    },
    /// Cut a region off: its port on the playground's bridge stops forwarding, so
    /// packets are dropped both ways (no resets). Needs `holdfast dev --netns`.
    ///
    /// Example: holdfast drill fault cut-region --data-dir /tmp/hf --region south
    CutRegion {
        #[arg(long, env = "HOLDFAST_PLAYGROUND")]
        data_dir: PathBuf,
        #[arg(long)]
        region: String,
    },
    /// Undo cut-region.
    ///
    /// Example: holdfast drill fault heal-region --data-dir /tmp/hf --region south
    HealRegion {
        #[arg(long, env = "HOLDFAST_PLAYGROUND")]
        data_dir: PathBuf,
        #[arg(long)]
        region: String,
    },
    /// SIGSTOP a cell's leader past its election timeout, then SIGCONT.
    ///
    /// Example: holdfast drill fault pause-leader --data-dir /tmp/hf --cell east-1 --ms 3000
    PauseLeader {
        #[arg(long, env = "HOLDFAST_PLAYGROUND")]
        data_dir: PathBuf,
        #[arg(long)]
        cell: String,
        #[arg(long, default_value_t = 3000)]
        ms: u64,
    },
    /// SIGSTOP any process (a lock holder past its TTL), then SIGCONT.
    ///
    /// Example: holdfast drill fault pause --pid 4242 --ms 10000
    Pause {
        #[arg(long)]
        pid: u32,
        #[arg(long)]
        ms: u64,
    },
    /// Restart every playground process that exited (SIGHUP to `holdfast dev`).
    ///
    /// Example: holdfast drill fault restart --data-dir /tmp/hf
    Restart {
        #[arg(long, env = "HOLDFAST_PLAYGROUND")]
        data_dir: PathBuf,
    },
}

pub async fn run(cmd: FaultCmd) -> Result<(), String> {
    match cmd {
        FaultCmd::KillLeader { data_dir, cell } => {
            let pg = Playground::load(&data_dir)?;
            let n = leader(&pg, &cell).await?;
            signal("KILL", pid_of(&n)?)?;
            println!("killed {} (node {}, pid {}), the leader of {cell}", n.name, n.node_id, pid_of(&n)?);
        }
        FaultCmd::KillRegion { data_dir, region } => {
            let pg = Playground::load(&data_dir)?;
            for pid in region_pids(&pg, &region)? {
                let _ = signal("KILL", pid);
            }
            println!("killed every process of {region}");
        }
        FaultCmd::CutRegion { data_dir, region } => {
            cut(&Playground::load(&data_dir)?, &region, true)?;
            println!("{region} cut off (packets dropped)");
        }
        FaultCmd::HealRegion { data_dir, region } => {
            cut(&Playground::load(&data_dir)?, &region, false)?;
            println!("{region} reconnected");
        }
        FaultCmd::PauseLeader { data_dir, cell, ms } => {
            let pg = Playground::load(&data_dir)?;
            let n = leader(&pg, &cell).await?;
            pause(pid_of(&n)?, Duration::from_millis(ms)).await?;
            println!("paused {} (leader of {cell}) for {ms} ms", n.name);
        }
        FaultCmd::Pause { pid, ms } => {
            pause(pid, Duration::from_millis(ms)).await?;
            println!("paused pid {pid} for {ms} ms");
        }
        FaultCmd::Restart { data_dir } => {
            let n = restart(&data_dir, Duration::from_secs(60)).await?;
            println!("holdfast dev restarted {n} process(es)");
        }
    }
    Ok(())
}

pub fn pid_of(n: &Node) -> Result<u32, String> {
    n.pid.ok_or_else(|| format!("{} has no pid in endpoints.json", n.name))
}

pub fn signal(sig: &str, pid: u32) -> Result<(), String> {
    let ok = std::process::Command::new("kill").args([&format!("-{sig}"), &pid.to_string()]).status().map_err(|e| e.to_string())?.success();
    if ok {
        Ok(())
    } else {
        Err(format!("kill -{sig} {pid} failed"))
    }
}

/// SIGSTOP, wait, SIGCONT — the SIGCONT is sent even if the wait is interrupted.
pub async fn pause(pid: u32, d: Duration) -> Result<(), String> {
    struct Cont(u32);
    impl Drop for Cont {
        fn drop(&mut self) {
            let _ = signal("CONT", self.0);
        }
    }
    signal("STOP", pid)?;
    let _cont = Cont(pid);
    tokio::time::sleep(d).await;
    Ok(())
}

/// The node a majority of the cell's members name as leader.
pub async fn leader(pg: &Playground, cell: &str) -> Result<Node, String> {
    let (_, c) = pg.cell(cell)?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let mut votes = std::collections::BTreeMap::new();
        for n in &c.nodes {
            let Ok(ch) = channel(&n.raft).await else { continue };
            if let Ok(Ok(m)) = tokio::time::timeout(Duration::from_secs(1), RaftAdminClient::new(ch).metrics(raftpb::MetricsRequest {})).await {
                let m = m.into_inner();
                if m.has_leader {
                    *votes.entry(m.leader_id).or_insert(0usize) += 1;
                }
            }
        }
        if let Some((id, _)) = votes.iter().find(|(_, v)| **v * 2 > c.nodes.len()) {
            if let Some(n) = c.nodes.iter().find(|n| n.node_id == *id) {
                return Ok(n.clone());
            }
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!("{cell} has no leader a majority agrees on"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub fn region_pids(pg: &Playground, region: &str) -> Result<Vec<u32>, String> {
    let r = pg.region(region)?;
    let mut pids: Vec<u32> = r.cells.iter().flat_map(|c| c.nodes.iter().filter_map(|n| n.pid)).collect();
    pids.extend(r.registry.pid);
    pids.extend(r.gateway.pid);
    Ok(pids)
}

/// Cuts (`true`) or heals a region: its bridge port's state, disabled (0) or
/// forwarding (3).
pub fn cut(pg: &Playground, region: &str, off: bool) -> Result<(), String> {
    let r = pg.region(region)?;
    let port = r.host_veth.as_ref().ok_or_else(|| format!("{region} is not in its own network namespace: start the playground with `holdfast dev --netns`"))?;
    let state = if off { "0" } else { "3" };
    let out = std::process::Command::new("bridge").args(["link", "set", "dev", port, "state", state]).output().map_err(|e| format!("bridge: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("bridge link set dev {port} state {state}: {}", String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// SIGHUP to the supervisor, then waits until every process in endpoints.json is
/// alive again. Returns how many pids changed.
pub async fn restart(data_dir: &Path, within: Duration) -> Result<usize, String> {
    let before = Playground::load(data_dir)?;
    let sup = before.supervisor_pid;
    let pids = |p: &Playground| -> Vec<u32> { p.regions.iter().flat_map(|r| super::faults::region_pids(p, &r.name).unwrap_or_default()).collect() };
    let old = pids(&before);
    signal("HUP", sup)?;
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Ok(now) = Playground::load(data_dir) {
            let cur = pids(&now);
            if cur.iter().all(|p| alive(*p)) {
                return Ok(cur.iter().filter(|p| !old.contains(p)).count());
            }
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!("not every playground process is alive {within:?} after SIGHUP"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub fn alive(pid: u32) -> bool {
    // /proc/<pid>/stat's state: a zombie (Z) or dead (X) process is not alive.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit(')').next().is_some_and(|rest| !matches!(rest.trim_start().chars().next(), Some('Z' | 'X'))))
}
