//! `holdfast registry run`: one registry voter's lifecycle. Forming the registry is
//! `holdfast cell init` against a registry node's Raft address: both groups serve the
//! same RaftAdmin there.

use crate::serve::{second_signal_exits, wait_for_signal};
use clap::{Args, Subcommand};
use holdfast_registry::{RegistryConfig, RegistryServer};
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub enum RegistryCmd {
    /// Run one registry node until SIGINT or SIGTERM.
    ///
    /// Example: holdfast registry run --node-id 1 --data-dir /var/lib/holdfast/registry-1 \
    ///            --raft-addr 127.0.0.1:7201 --client-addr 127.0.0.1:7200 --region east
    ///
    /// Form the registry once, from any one voter:
    ///   holdfast cell init --raft-endpoint 127.0.0.1:7201 --member 1=127.0.0.1:7201,127.0.0.1:7200 ...
    Run(RunArgs),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// TOML file with the node's settings (fields of `RegistryConfig`); flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    #[arg(long)]
    node_id: Option<u64>,
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Where peers reach this node's Raft service (and RaftAdmin).
    #[arg(long)]
    raft_addr: Option<String>,
    /// Where cells, gateways and operators reach RegistryService.
    #[arg(long)]
    client_addr: Option<String>,
    /// The region this voter runs in (logs only).
    #[arg(long)]
    region: Option<String>,
}

pub async fn run(cmd: RegistryCmd) -> Result<(), String> {
    match cmd {
        RegistryCmd::Run(a) => run_node(a).await,
    }
}

async fn run_node(a: RunArgs) -> Result<(), String> {
    let mut overrides = Vec::new();
    if let Some(v) = a.node_id {
        overrides.push(("node_id", v.to_string()));
    }
    if let Some(v) = a.data_dir {
        overrides.push(("data_dir", v.display().to_string()));
    }
    for (key, v) in [("raft_addr", a.raft_addr), ("client_addr", a.client_addr), ("region", a.region)] {
        if let Some(v) = v {
            overrides.push((key, v));
        }
    }
    let cfg = RegistryConfig::load(a.config.as_deref(), &overrides).map_err(|e| e.to_string())?;
    let server = RegistryServer::bind(&cfg).await.map_err(|e| format!("cannot start the registry node: {e}"))?;
    println!("registry node {} up: raft {} client {}", cfg.node_id, server.raft_addr(), server.client_addr());
    wait_for_signal().await;
    second_signal_exits();
    server.shutdown().await;
    Ok(())
}
