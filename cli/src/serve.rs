//! `holdfast cell run|init|status`: a cell node's lifecycle.

use crate::remote::ClientTls;
use clap::{Args, Subcommand};
use holdfast_cell::{CellConfig, CellServer};
use holdfast_proto::raft::v1 as rpb;
use holdfast_proto::raft::v1::raft_admin_client::RaftAdminClient;
use std::path::PathBuf;
use std::time::Duration;
use tracing::{info, warn};

#[derive(Debug, Subcommand)]
pub enum CellCmd {
    /// Run one node of a cell until SIGINT or SIGTERM.
    ///
    /// Example: holdfast cell run --config cell-1.toml --node-id 1
    Run(RunArgs),
    /// Form a new cell from its first voters (once, on any one of them).
    ///
    /// Example: holdfast cell init --raft-endpoint 127.0.0.1:7101 \
    ///            --member 1=127.0.0.1:7101,127.0.0.1:7001 --member 2=... --member 3=...
    Init(InitArgs),
    /// Record a cell and its members in the registry (again after a member change):
    /// the registry then places shards on it and gateways route to it.
    ///
    /// Example: holdfast cell register --cell east-2 --region east \
    ///            --member 1=east-2-0.example:7301,east-2-0.example:7300 --member 2=... --member 3=...
    Register(crate::ops::RegisterCellArgs),
    /// Forget a cell in the registry: refused while it owns a shard or one is moving
    /// to it (move them first: holdfast shard move, or drill evacuate). Stop its nodes
    /// afterwards.
    ///
    /// Example: holdfast cell retire --cell east-2
    Retire(crate::ops::RetireCellArgs),
    /// Change a running cell's voters: add, remove or replace a node (learner first).
    #[command(subcommand)]
    Member(crate::members::MemberCmd),
    /// Form a cell that lost its majority for good again from one stopped survivor's
    /// data directory (docs/runbooks/cell-quorum-lost.md): its state is copied into a
    /// new cell of one member on the data directory the node flags (or --config)
    /// name, with every shard sealed, so the cell grants nothing at the epochs it had:
    /// the registry restarts each shard at its next epoch and the cell adopts it.
    /// Start the node with `cell run`, then add members back with `cell member add`.
    /// Refuses while a member of the old cell still answers with a leader, unless
    /// --force-new-group.
    ///
    /// Example: holdfast cell recover --from /var/lib/holdfast/east-1-0 --config east-1-0.toml \
    ///            --data-dir /var/lib/holdfast/east-1-0.recovered
    Recover(RecoverArgs),
    /// Show a node's Raft state: leader, term, commit index.
    ///
    /// Example: holdfast cell status --raft-endpoint 127.0.0.1:7101
    Status {
        #[arg(long, env = "HOLDFAST_RAFT_ENDPOINT")]
        raft_endpoint: String,
        #[command(flatten)]
        tls: ClientTls,
    },
}

/// A server's TLS flags: each overrides the same key of `[tls]` in its config file.
#[derive(Debug, Args)]
pub struct ServerTls {
    /// Directory with ca.crt, node.crt and node.key (`holdfast cert create-node`).
    #[arg(long)]
    certs_dir: Option<PathBuf>,
    /// Plaintext and no authentication on every port: anyone who reaches the process
    /// can call anything. For a laptop only; logged loudly.
    #[arg(long)]
    insecure: bool,
}

impl ServerTls {
    /// The config keys these flags set.
    pub fn overrides(&self) -> [(&'static str, Option<String>); 2] {
        [("tls.certs_dir", self.certs_dir.as_ref().map(|d| d.display().to_string())), ("tls.insecure", self.insecure.then(|| "true".to_owned()))]
    }
}

/// The flags every Raft node takes, cell node or registry voter; each overrides the
/// same key of the node's config file (and of `HOLDFAST_*`).
#[derive(Debug, Args)]
pub struct NodeArgs {
    /// TOML file with the node's settings (docs/runbooks/cell-bootstrap.md); flags
    /// override it.
    #[arg(long)]
    config: Option<PathBuf>,
    #[arg(long)]
    node_id: Option<u64>,
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Where peers reach this node's Raft service (and RaftAdmin).
    #[arg(long)]
    raft_addr: Option<String>,
    /// Where clients reach this node's API.
    #[arg(long)]
    client_addr: Option<String>,
    /// The region this node runs in.
    #[arg(long)]
    region: Option<String>,
    /// Print the configuration this node would run with (defaults, file, `HOLDFAST_*`
    /// environment, flags), as JSON, and exit.
    #[arg(long)]
    print_config: bool,
    #[command(flatten)]
    tls: ServerTls,
}

impl NodeArgs {
    pub fn config(&self) -> Option<&std::path::Path> {
        self.config.as_deref()
    }

    /// The config keys these flags set, plus `more`.
    pub fn overrides(&self, more: impl IntoIterator<Item = (&'static str, Option<String>)>) -> Vec<(&'static str, String)> {
        let own = [
            ("node_id", self.node_id.map(|v| v.to_string())),
            ("data_dir", self.data_dir.as_ref().map(|v| v.display().to_string())),
            ("raft_addr", self.raft_addr.clone()),
            ("client_addr", self.client_addr.clone()),
            ("region", self.region.clone()),
        ];
        overrides(own.into_iter().chain(self.tls.overrides()).chain(more))
    }
}

/// `--print-config`: the effective configuration, as JSON.
pub(crate) fn print_config(cfg: &impl serde::Serialize) -> Result<(), String> {
    println!("{}", serde_json::to_string_pretty(cfg).map_err(|e| e.to_string())?);
    Ok(())
}

impl NodeArgs {
    pub fn print_config(&self) -> bool {
        self.print_config
    }
}

/// The keys that were given.
pub(crate) fn overrides(pairs: impl IntoIterator<Item = (&'static str, Option<String>)>) -> Vec<(&'static str, String)> {
    pairs.into_iter().filter_map(|(k, v)| v.map(|v| (k, v))).collect()
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    node: NodeArgs,
    /// The cell's name (the registry knows it by this name).
    #[arg(long)]
    cell: Option<String>,
    /// Registry client addresses, comma-separated: the cell follows the registry
    /// (ownership lease, adoption, seals) instead of admin calls.
    #[arg(long)]
    registry: Option<String>,
    /// Serve /metrics, /healthz and /readyz on this address.
    #[arg(long)]
    metrics_addr: Option<String>,
    /// A planted bug for drills (`token-reuse`); debug builds only.
    #[arg(long, hide = true)]
    unsafe_plant: Option<String>,
}

#[derive(Debug, Args)]
pub struct RecoverArgs {
    /// The stopped survivor's data directory.
    #[arg(long)]
    from: PathBuf,
    /// The recovered node: its id, new data directory and addresses (as `cell run`).
    #[command(flatten)]
    node: NodeArgs,
    /// The cell's name.
    #[arg(long)]
    cell: Option<String>,
    /// Skip the check that no member of the old cell still has a leader.
    #[arg(long)]
    force_new_group: bool,
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// Raft address of the node that performs the initialization.
    #[arg(long, env = "HOLDFAST_RAFT_ENDPOINT")]
    raft_endpoint: String,
    /// ID=RAFT_ADDR,CLIENT_ADDR, once per first voter.
    #[arg(long = "member", required = true)]
    members: Vec<String>,
    /// How long to wait for the node to answer, in seconds: a bootstrap often runs
    /// right after its processes start, while a node is still opening its store.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(0..=3600))]
    wait: u64,
    #[command(flatten)]
    tls: ClientTls,
}

pub async fn run(cmd: CellCmd) -> Result<(), String> {
    match cmd {
        CellCmd::Run(a) => run_node(a).await,
        CellCmd::Init(a) => init(a, "cell").await,
        CellCmd::Register(a) => crate::ops::register_cell(a).await,
        CellCmd::Member(m) => crate::members::run(m).await,
        CellCmd::Retire(a) => crate::ops::retire_cell(a).await,
        CellCmd::Status { raft_endpoint, tls } => status(raft_endpoint, &tls).await,
        CellCmd::Recover(a) => recover(a).await,
    }
}

async fn recover(a: RecoverArgs) -> Result<(), String> {
    let cfg = CellConfig::load(a.node.config(), &a.node.overrides([("cell", a.cell)])).map_err(|e| e.to_string())?;
    if a.node.print_config {
        return print_config(&cfg);
    }
    if !a.force_new_group {
        let members = holdfast_cell::recover::lost_members(&a.from)?;
        refuse_if_old_cell_leads(&cfg, members).await?;
    }
    let r = holdfast_cell::recover::recover_from_survivor(&a.from, &cfg)?;
    println!(
        "cell {} recovered from node {} (entry {} of term {}) into {} as node {} (disk {:016x})",
        cfg.cell,
        r.source_node,
        r.last_index,
        r.last_term,
        cfg.data_dir.display(),
        cfg.node_id,
        r.disk
    );
    print_cell_recovered(&r, &cfg);
    Ok(())
}

/// Refuses when a member of the old cell (`members`: id, Raft address) still answers
/// with a leader.
pub(crate) async fn refuse_if_old_cell_leads(cfg: &CellConfig, members: Vec<(u64, String)>) -> Result<(), String> {
    let transport = holdfast_rpc::Transport::new(cfg.transport.clone(), cfg.tls.security()?);
    crate::remote::refuse_if_old_group_leads(&transport, &format!("cell {}", cfg.cell), members).await
}

/// What a cell recovery or restore sealed, and what to do next.
pub(crate) fn print_cell_recovered(r: &holdfast_cell::recover::CellRecovered, cfg: &CellConfig) {
    let sealed: Vec<String> = r.sealed.iter().map(|(s, e)| format!("{s}@{e}")).collect();
    println!(
        "{} shards sealed at the epochs they had ({}); {} sessions homed in them ended, {} left",
        r.sealed.len(),
        if sealed.is_empty() { "none".to_owned() } else { sealed.join(" ") },
        r.sessions_ended,
        r.sessions_left
    );
    let lost: Vec<String> = r.lost_members.iter().map(|(id, addr)| format!("{id}={addr}")).collect();
    println!(
        "the lost cell's members were {}; start this node with `holdfast cell run` on {}: the registry restarts each shard at its next epoch and the cell adopts it; then add members back on empty disks with `holdfast cell member add`",
        lost.join(" "),
        cfg.data_dir.display()
    );
}

async fn run_node(a: RunArgs) -> Result<(), String> {
    let overrides =
        a.node.overrides([("cell", a.cell), ("registry_endpoints", a.registry), ("metrics_addr", a.metrics_addr), ("unsafe_plant", a.unsafe_plant)]);
    let cfg = CellConfig::load(a.node.config(), &overrides).map_err(|e| e.to_string())?;
    if a.node.print_config {
        return print_config(&cfg);
    }
    let server = CellServer::start(&cfg).await.map_err(|e| format!("cannot start the node: {e}"))?;
    println!("cell {} node {} up: raft {} client {}", cfg.cell, cfg.node_id, server.raft_addr(), server.client_addr());
    until_signal_or_failure(server.failure(), server.shutdown()).await
}

/// Runs a Raft node until SIGINT or SIGTERM, or until its Raft stops on a fatal error
/// (a storage write failed); then `stop`. A failed node's process exits non-zero, so a
/// supervisor sees it and `/readyz` is gone.
pub(crate) async fn until_signal_or_failure(failure: holdfast_raft::Failure, stop: impl std::future::Future<Output = ()>) -> Result<(), String> {
    let failed = tokio::select! {
        _ = wait_for_signal() => None,
        why = failure.wait() => Some(why),
    };
    if failed.is_none() {
        second_signal_exits();
    }
    stop.await;
    match failed {
        None => Ok(()),
        Some(why) => Err(format!("the node stopped on a fatal error: {why}")),
    }
}

/// Runs until SIGINT or SIGTERM, then `stop` (a second signal exits at once).
pub(crate) async fn until_signal(stop: impl std::future::Future<Output = ()>) {
    wait_for_signal().await;
    second_signal_exits();
    stop.await;
}

/// After the first signal: a second one exits at once, for an operator who will not
/// wait out a shutdown deadline.
fn second_signal_exits() {
    info!("shutting down (a second signal exits at once)");
    tokio::spawn(async {
        wait_for_signal().await;
        warn!("second signal: exiting now");
        std::process::exit(130);
    });
}

/// SIGINT or SIGTERM, whichever comes first (docs/development.md: SIGTERM must be handled).
pub(crate) async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("install SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// One `--member ID=RAFT_ADDR,CLIENT_ADDR`, each address a `host:port` (DNS name or IP).
pub(crate) fn parse_member(m: &str) -> Result<rpb::Member, String> {
    let bad = || format!("--member {m:?}: expected ID=RAFT_ADDR,CLIENT_ADDR");
    let (id, addrs) = m.split_once('=').ok_or_else(bad)?;
    let (raft, client) = addrs.split_once(',').ok_or_else(bad)?;
    let node_id = id.parse().ok().filter(|id| *id > 0).ok_or_else(|| format!("--member {m:?}: {id:?} is not a node id (1 or more)"))?;
    for a in [raft, client] {
        holdfast_rpc::host_port(a).map_err(|e| format!("--member {m:?}: {e}"))?;
    }
    Ok(rpb::Member { node_id, raft_addr: raft.into(), client_addr: client.into() })
}

/// Forms a group (a cell, or the registry) from its first voters. A node that already
/// has a log belongs to a formed group: nothing is sent, and that is success, so a
/// bootstrap script can be run again.
pub(crate) async fn init(a: InitArgs, what: &str) -> Result<(), String> {
    let members = a.members.iter().map(|m| parse_member(m)).collect::<Result<Vec<_>, _>>()?;
    // One endpoint: an unreachable node, or one answering UNAVAILABLE, is asked again
    // (shown on stderr) until `--wait` passes; a malformed address fails at once.
    let node = crate::remote::Remote::new(&a.raft_endpoint, &a.tls).map_err(|e| format!("--raft-endpoint: {e}"))?;
    let m = node.call_for(Duration::from_secs(a.wait), |ch| async move { RaftAdminClient::new(ch).metrics(rpb::MetricsRequest {}).await }).await?;
    if m.has_log {
        println!("{what} already formed ({} has a log; term {}): nothing to do", a.raft_endpoint, m.current_term);
        return Ok(());
    }
    let members = &members;
    node.once(|ch| async move { RaftAdminClient::new(ch).initialize(rpb::InitializeRequest { members: members.clone() }).await })
        .await
        .map_err(|e| format!("initialize refused: {e}"))?;
    println!("{what} initialized with {} voters", a.members.len());
    Ok(())
}

/// One node's own view, asked once with the transport's per-attempt deadline: a node
/// that takes the connection and never answers fails the command, not hangs it.
async fn status(endpoint: String, tls: &ClientTls) -> Result<(), String> {
    let node = crate::remote::Remote::new(&endpoint, tls).map_err(|e| format!("--raft-endpoint: {e}"))?;
    let m = node.once(|ch| async move { RaftAdminClient::new(ch).metrics(rpb::MetricsRequest {}).await }).await?;
    let out = serde_json::json!({
        "node_id": m.node_id,
        "state": m.server_state,
        "term": m.current_term,
        "leader": m.has_leader.then_some(m.leader_id),
        "leader_client_addr": m.leader_client_addr,
        "commit_index": m.has_committed.then_some(m.commit_index),
        "last_applied": m.has_applied.then_some(m.last_applied_index),
    });
    println!("{}", serde_json::to_string_pretty(&out).expect("json"));
    Ok(())
}
