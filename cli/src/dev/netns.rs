//! `holdfast dev --netns`: each region in its own Linux network namespace, joined by a
//! bridge in the root namespace, so a drill can cut a region off with real packet drops
//! (`bridge link set dev <host veth> state 0`; `state 3` heals). Names and addresses
//! are in [`NetnsLayout`]; everything is done with iproute2's `ip`.

use super::layout::{NetnsLayout, NETNS_PREFIX};
use std::process::Stdio;
use tracing::{debug, info};

/// Root and `ip`, or a one-line error naming what is missing.
pub fn preflight() -> Result<(), String> {
    if effective_uid()? != 0 {
        return Err("holdfast dev --netns needs root (it creates network namespaces, veth pairs and a bridge)".into());
    }
    match std::process::Command::new("ip").arg("-V").stdout(Stdio::null()).stderr(Stdio::null()).status() {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("holdfast dev --netns needs iproute2's `ip` command; `ip -V` failed ({s})")),
        Err(e) => Err(format!("holdfast dev --netns needs iproute2's `ip` command (not found: {e})")),
    }
}

/// The effective uid, from /proc (the workspace forbids `unsafe`, so no geteuid).
fn effective_uid() -> Result<u32, String> {
    let status = std::fs::read_to_string("/proc/self/status").map_err(|e| format!("/proc/self/status: {e}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        .and_then(|id| id.parse().ok())
        .ok_or_else(|| "/proc/self/status names no effective uid".into())
}

async fn ip(args: &[&str]) -> Result<String, String> {
    debug!(?args, "ip");
    let out = tokio::process::Command::new("ip").args(args).stdin(Stdio::null()).output().await.map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Creates the bridge, the namespaces and the veth pairs, after removing what a crashed
/// run with the same names left behind. Refuses if a namespace of that name still has
/// processes: another playground with the same base port is running.
pub async fn setup(n: &NetnsLayout) -> Result<(), String> {
    for r in &n.regions {
        if let Ok(pids) = ip(&["netns", "pids", &r.netns]).await {
            let pids: Vec<&str> = pids.split_whitespace().collect();
            if !pids.is_empty() {
                return Err(format!("network namespace {} is in use (pids {}): is another playground with this base port running?", r.netns, pids.join(" ")));
            }
        }
    }
    teardown(n).await;
    let result = async {
        let cidr = |ip: &str| format!("{ip}/{NETNS_PREFIX}");
        ip(&["link", "add", &n.bridge, "type", "bridge"]).await?;
        ip(&["addr", "add", &cidr(&n.bridge_ip), "dev", &n.bridge]).await?;
        ip(&["link", "set", &n.bridge, "up"]).await?;
        for r in &n.regions {
            ip(&["netns", "add", &r.netns]).await?;
            ip(&["link", "add", &r.host_veth, "type", "veth", "peer", "name", &r.peer_veth, "netns", &r.netns]).await?;
            ip(&["link", "set", &r.host_veth, "master", &n.bridge]).await?;
            ip(&["link", "set", &r.host_veth, "up"]).await?;
            ip(&["-n", &r.netns, "link", "set", "lo", "up"]).await?;
            ip(&["-n", &r.netns, "addr", "add", &cidr(&r.ip), "dev", &r.peer_veth]).await?;
            ip(&["-n", &r.netns, "link", "set", &r.peer_veth, "up"]).await?;
        }
        Ok::<(), String>(())
    }
    .await;
    match result {
        Ok(()) => {
            info!(bridge = %n.bridge, regions = n.regions.len(), "network namespaces up");
            Ok(())
        }
        Err(e) => {
            teardown(n).await;
            Err(format!("setting up the network namespaces: {e}"))
        }
    }
}

/// Removes the veth pairs, the namespaces and the bridge; what is already gone is no
/// error. Call it once no process runs in the namespaces.
pub async fn teardown(n: &NetnsLayout) {
    for r in &n.regions {
        // Deleting one end of a veth pair deletes both.
        let _ = ip(&["link", "del", &r.host_veth]).await;
        let _ = ip(&["netns", "del", &r.netns]).await;
    }
    let _ = ip(&["link", "del", &n.bridge]).await;
}
