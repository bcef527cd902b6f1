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
    /// Form the registry again from one stopped survivor, after its majority was lost
    /// for good (docs/runbooks/disaster-recovery.md). Reads the survivor's data
    /// directory (its log, vote and snapshot unchanged), raises every shard's epoch past any the lost
    /// registry can have served, and writes a registry of one voter on the data
    /// directory the node flags (or --config) name; start that node with `registry
    /// run`, then add voters back with `registry member add`. Refuses while a member
    /// of the old registry still answers with a leader, unless --force-new-group.
    ///
    /// Example: holdfast registry recover --from /var/lib/holdfast/registry-1 --config registry-1.toml \
    ///            --data-dir /var/lib/holdfast/registry-1.recovered
    Recover(RecoverArgs),
}

#[derive(Debug, Args)]
pub struct RecoverArgs {
    /// The stopped survivor's data directory.
    #[arg(long)]
    from: std::path::PathBuf,
    /// The recovered voter: its id, new data directory and addresses (as `registry run`).
    #[command(flatten)]
    node: NodeArgs,
    /// How far every shard's epoch is raised: more than the moves of one shard the lost
    /// registry can have committed that the survivor did not hear of.
    #[arg(long, default_value_t = holdfast_registry::recover::RECOVERY_EPOCH_GAP)]
    epoch_gap: u32,
    /// Skip the check that no member of the old registry still has a leader: only when
    /// they are known to be gone for good (a member that comes back on its old disk is
    /// refused by the new registry either way).
    #[arg(long)]
    force_new_group: bool,
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
        RegistryCmd::Recover(a) => recover(a).await,
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

async fn recover(a: RecoverArgs) -> Result<(), String> {
    let cfg = RegistryConfig::load(a.node.config(), &a.node.overrides([])).map_err(|e| e.to_string())?;
    if a.node.print_config() {
        return crate::serve::print_config(&cfg);
    }
    let by = format!("holdfast registry recover (node {}, as {})", cfg.node_id, whoami());
    if !a.force_new_group {
        // Read first (a dry run of the recovery into nothing) to learn the old members,
        // then ask each whether its group still has a leader.
        refuse_if_old_registry_leads(&cfg, holdfast_registry::recover::lost_members(&a.from)?).await?;
    }
    let r = holdfast_registry::recover::recover_from_survivor(&a.from, &cfg, a.epoch_gap, &by)?;
    println!(
        "registry recovered from node {} (entry {} of term {}, {} entries replayed after its snapshot) into {} as node {} (disk {:016x})",
        r.survivor,
        r.last_index,
        r.last_term,
        r.replayed,
        cfg.data_dir.display(),
        cfg.node_id,
        r.disk
    );
    print_recovered(&r, &cfg, a.epoch_gap);
    Ok(())
}

/// Refuses when a member of the old registry (`members`: id, Raft address) still
/// answers with a leader.
pub(crate) async fn refuse_if_old_registry_leads(cfg: &RegistryConfig, members: Vec<(u64, String)>) -> Result<(), String> {
    let transport = holdfast_rpc::Transport::new(cfg.transport.clone(), cfg.tls.security()?);
    crate::remote::refuse_if_old_group_leads(&transport, "the old registry", members).await
}

/// What a recovery or a restore raised, and what to do next.
pub(crate) fn print_recovered(r: &holdfast_registry::recover::Recovered, cfg: &RegistryConfig, gap: u32) {
    println!(
        "{} shards raised by {} epochs (highest epoch {} -> {}), {} moves in flight dropped; revision {} -> {}",
        r.recovery.shards,
        gap,
        r.recovery.highest_epoch_before,
        r.recovery.highest_epoch,
        r.recovery.moves_dropped,
        r.recovery.revision_before.0,
        r.recovery.revision.0
    );
    let lost: Vec<String> = r.lost_members.iter().map(|(id, addr)| format!("{id}={addr}")).collect();
    println!("the lost registry's voters were {}; start this node with `holdfast registry run` on {}, then add voters back on empty disks with `holdfast registry member add`", lost.join(" "), cfg.data_dir.display());
}

/// The operator's login name, for the audit record.
pub(crate) fn whoami() -> String {
    std::env::var("USER").or_else(|_| std::env::var("LOGNAME")).unwrap_or_else(|_| "unknown".into())
}
