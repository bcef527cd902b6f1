//! `holdfast registry run`: one registry voter's lifecycle. Forming the registry is
//! `holdfast cell init` against a registry node's Raft address: both groups serve the
//! same RaftAdmin there.

use crate::serve::{until_signal_or_failure, NodeArgs};
use clap::{Args, Subcommand};
use holdfast_registry::{RegistryConfig, RegistryServer};

#[derive(Debug, Subcommand)]
pub enum RegistryCmd {
    /// Run one registry node until SIGINT or SIGTERM.
    ///
    /// Example: holdfast registry run --node-id 1 --data-dir /var/lib/holdfast/registry-1 \
    ///            --raft-addr 127.0.0.1:7201 --client-addr 127.0.0.1:7200 --region east
    ///
    /// Form the registry once, from any one voter:
    ///   holdfast registry init --raft-endpoint 127.0.0.1:7201 --member 1=127.0.0.1:7201,127.0.0.1:7200 ...
    Run(RunArgs),
    /// Form the registry from its first voters (one per region), once, on any one of
    /// them; a voter that already has a log is left alone.
    ///
    /// Example: holdfast registry init --raft-endpoint reg-east:7201 \
    ///            --member 1=reg-east:7201,reg-east:7200 --member 2=reg-west:7201,reg-west:7200 --member 3=...
    Init(crate::serve::InitArgs),
    /// Change the registry's voters (a region added or retired): add, remove or
    /// replace a voter, learner first.
    #[command(subcommand)]
    Member(crate::members::MemberCmd),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// `--client-addr` is where cells, gateways and operators reach RegistryService;
    /// `--region` is for logs only.
    #[command(flatten)]
    node: NodeArgs,
    /// Serve /metrics, /healthz and /readyz on this address.
    #[arg(long)]
    metrics_addr: Option<String>,
    /// How long one ownership renewal lets a cell serve its shards, ms (the config's
    /// `ownership_lease_ms`; default 35 minutes: docs/registry.md, "Static stability").
    #[arg(long)]
    ownership_lease_ms: Option<u64>,
}

pub async fn run(cmd: RegistryCmd) -> Result<(), String> {
    match cmd {
        RegistryCmd::Run(a) => run_node(a).await,
        RegistryCmd::Init(a) => crate::serve::init(a, "registry").await,
        RegistryCmd::Member(m) => crate::members::run(m).await,
    }
}

async fn run_node(a: RunArgs) -> Result<(), String> {
    let more = [("metrics_addr", a.metrics_addr), ("ownership_lease_ms", a.ownership_lease_ms.map(|v| v.to_string()))];
    let cfg = RegistryConfig::load(a.node.config(), &a.node.overrides(more)).map_err(|e| e.to_string())?;
    if a.node.print_config() {
        return crate::serve::print_config(&cfg);
    }
    let server = RegistryServer::bind(&cfg).await.map_err(|e| format!("cannot start the registry node: {e}"))?;
    println!("registry node {} up: raft {} client {}", cfg.node_id, server.raft_addr(), server.client_addr());
    until_signal_or_failure(server.failure(), server.shutdown()).await
}
