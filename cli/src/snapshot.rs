//! `holdfast snapshot save|inspect|restore`: a group's whole state in a file an
//! operator keeps off the cluster (the layout: `holdfast_raft::snapshot_file`), and a
//! new registry or cell formed from one (docs/runbooks/disaster-recovery.md).

use crate::client::registry;
use crate::remote::{ClientTls, Remote};
use crate::serve::NodeArgs;
use clap::{Args, Subcommand};
use holdfast_cell::CellConfig;
use holdfast_proto::admin::v1::cell_admin_client::CellAdminClient;
use holdfast_proto::raft::v1 as raftpb;
use holdfast_proto::registry::v1 as rpb;
use holdfast_raft::snapshot_file::{self, GroupKind, Header, REGISTRY_GROUP};
use holdfast_registry::RegistryConfig;
use serde_json::json;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Debug, Subcommand)]
pub enum SnapshotCmd {
    /// Save the registry's or one cell's whole state to a file: read by the group's
    /// leader at a known Raft index, streamed, checked, then renamed into place (an
    /// existing file is never overwritten). Audited. The registry's is asked of the
    /// gateways (an operator) or of the registry's voters (root); a cell's of its
    /// nodes (root), found through the registry unless --cell-endpoints names them.
    ///
    /// Example: holdfast snapshot save --registry -o registry-$(date +%F).snap
    ///          holdfast snapshot save --cell east-1 -o east-1.snap
    Save(SaveArgs),
    /// Check a snapshot file whole (format, length, checksum) and print what it holds.
    ///
    /// Example: holdfast snapshot inspect registry-2026-12-07.snap
    Inspect {
        file: PathBuf,
        /// One JSON document instead of lines.
        #[arg(long)]
        json: bool,
    },
    /// Form a new group of one member from a snapshot: a registry with every shard's
    /// epoch raised past any the lost registry can have served since (as `registry
    /// recover`), or a cell with every shard sealed, so that the registry restarts
    /// each at its next epoch before the cell grants (as `cell recover`). The file is
    /// checked whole before anything is written; the node flags (or --config) name the
    /// new member and its new, empty data directory. Start it with `registry run` or
    /// `cell run`, then add members back with `member add`. Refuses while a member the
    /// snapshot lists still answers with a leader, unless --force-new-group.
    ///
    /// Example: holdfast snapshot restore registry-2026-12-07.snap --config registry-1.toml \
    ///            --data-dir /var/lib/holdfast/registry-1.restored
    Restore(RestoreArgs),
}

#[derive(Debug, Args)]
pub struct SaveArgs {
    /// The registry's snapshot.
    #[arg(long, conflicts_with = "cell", required_unless_present = "cell")]
    registry: bool,
    /// This cell's snapshot.
    #[arg(long)]
    cell: Option<String>,
    /// Where to write it.
    #[arg(short = 'o', long = "out")]
    out: PathBuf,
    /// Gateways' gRPC addresses (or the registry voters' client addresses),
    /// comma-separated.
    #[arg(long = "endpoints", env = "HOLDFAST_ENDPOINTS", default_value = "127.0.0.1:7000")]
    endpoints: String,
    /// The cell's nodes' client addresses, comma-separated (default: the registry's
    /// record of the cell, through --endpoints).
    #[arg(long)]
    cell_endpoints: Option<String>,
    #[command(flatten)]
    tls: ClientTls,
}

#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// The snapshot file.
    file: PathBuf,
    /// The new voter: its id, new data directory and addresses (as `registry run`).
    #[command(flatten)]
    node: NodeArgs,
    /// A registry's snapshot: how far every shard's epoch is raised, more than the
    /// moves of one shard since the snapshot was taken.
    #[arg(long, default_value_t = holdfast_registry::recover::RECOVERY_EPOCH_GAP)]
    epoch_gap: u32,
    /// A cell's snapshot: the cell's name (default: the one the file names).
    #[arg(long)]
    cell: Option<String>,
    /// Skip the check that no member the snapshot lists still has a leader.
    #[arg(long)]
    force_new_group: bool,
}

pub async fn run(cmd: SnapshotCmd) -> Result<(), String> {
    match cmd {
        SnapshotCmd::Save(a) => save(a).await,
        SnapshotCmd::Inspect { file, json } => inspect(&file, json),
        SnapshotCmd::Restore(a) => restore(a).await,
    }
}

async fn save(a: SaveArgs) -> Result<(), String> {
    if a.out.exists() {
        return Err(format!("{} exists; a snapshot never overwrites a file", a.out.display()));
    }
    let started = Instant::now();
    let remote = Remote::new(&a.endpoints, &a.tls)?;
    let stream = match (a.registry, &a.cell) {
        (true, _) => {
            let req = raftpb::SaveSnapshotRequest { group: REGISTRY_GROUP.into() };
            remote.call(|ch| registry(ch, req.clone(), |mut c, r| async move { c.save_snapshot(r).await })).await?
        }
        (false, Some(cell)) => {
            let nodes = match &a.cell_endpoints {
                Some(e) => e.clone(),
                None => cell_nodes(&remote, cell).await?,
            };
            let req = raftpb::SaveSnapshotRequest { group: cell.clone() };
            Remote::new(&nodes, &a.tls)?
                .call(|ch| {
                    let req = req.clone();
                    async move { CellAdminClient::new(ch).save_snapshot(req).await }
                })
                .await?
        }
        (false, None) => return Err("name the group: --registry or --cell NAME".into()),
    };
    let partial = partial_path(&a.out);
    let written = receive(stream, &partial).await;
    let header = written.and_then(|()| snapshot_file::verify(&partial).map_err(|e| format!("the file received does not check: {e}")));
    let header = match header {
        Ok(h) => h,
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            return Err(e);
        }
    };
    std::fs::rename(&partial, &a.out).map_err(|e| format!("cannot rename {} to {}: {e}", partial.display(), a.out.display()))?;
    sync_dir(&a.out);
    println!(
        "saved {} {:?} at entry {} of term {} ({} bytes of state) to {} in {} ms",
        header.kind,
        header.group,
        header.last_index,
        header.last_term,
        header.state_bytes,
        a.out.display(),
        started.elapsed().as_millis()
    );
    Ok(())
}

/// The client addresses of `cell`'s nodes, from the registry.
async fn cell_nodes(remote: &Remote, cell: &str) -> Result<String, String> {
    let cells = remote.call(|ch| registry(ch, rpb::ListCellsRequest::default(), |mut c, r| async move { c.list_cells(r).await })).await?.cells;
    let found =
        cells.into_iter().find(|c| c.cell == cell).ok_or_else(|| format!("the registry knows no cell {cell:?}; name its nodes with --cell-endpoints"))?;
    Ok(found.members.iter().map(|m| m.client_addr.as_str()).collect::<Vec<_>>().join(","))
}

/// `FILE.partial`, next to it (the same file system, for the rename).
fn partial_path(out: &Path) -> PathBuf {
    let mut name = out.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".partial");
    out.with_file_name(name)
}

/// Writes the pieces of `stream` to `path` and syncs it.
async fn receive(mut stream: tonic::Streaming<raftpb::SnapshotChunk>, path: &Path) -> Result<(), String> {
    let failed = |e: std::io::Error| format!("writing {}: {e}", path.display());
    // A `.partial` left by a save that was killed is ours to overwrite.
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).open(path).map_err(failed)?;
    let mut received = 0u64;
    while let Some(chunk) =
        stream.message().await.map_err(|s| format!("the snapshot stream broke after {received} bytes: {}", holdfast_rpc::status::one_line(&s)))?
    {
        file.write_all(&chunk.data).map_err(failed)?;
        received += chunk.data.len() as u64;
    }
    file.sync_all().map_err(failed)
}

/// Makes a rename in `file`'s directory durable.
fn sync_dir(file: &Path) {
    let dir = file.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

fn inspect(file: &Path, as_json: bool) -> Result<(), String> {
    let header = snapshot_file::verify(file).map_err(|e| e.to_string())?;
    let bytes = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
    if as_json {
        let doc = json!({ "file": file, "file_bytes": bytes, "format_version": snapshot_file::FORMAT_VERSION, "checksum": "ok", "header": header });
        println!("{}", serde_json::to_string_pretty(&doc).expect("json"));
        return Ok(());
    }
    print_header(file, bytes, &header);
    Ok(())
}

fn print_header(file: &Path, bytes: u64, h: &Header) {
    println!("file            {} ({bytes} bytes, checksum ok)", file.display());
    println!("group           {} {:?}", h.kind, h.group);
    println!("last entry      index {} term {} (led by node {})", h.last_index, h.last_term, h.last_leader);
    println!("served by       node {} in term {}", h.leader, h.term);
    let members: Vec<String> = h.members.iter().map(|(id, m)| format!("{id}={},{}", m.raft, m.client)).collect();
    println!("members         {}", members.join(" "));
    println!("taken at        {} ms since the epoch, by {}", h.taken_at_unix_ms, h.taken_by);
    println!("written by      holdfast {}", h.holdfast_version);
    println!("state           {} bytes", h.state_bytes);
}

async fn restore(a: RestoreArgs) -> Result<(), String> {
    // The header says which group; the restore itself reads the file whole and checks
    // it before it writes anything.
    let header = snapshot_file::header(&a.file).map_err(|e| e.to_string())?;
    match header.kind {
        GroupKind::Registry => restore_registry(a, &header).await,
        GroupKind::Cell => restore_cell(a, &header).await,
    }
}

async fn restore_registry(a: RestoreArgs, header: &Header) -> Result<(), String> {
    let cfg = RegistryConfig::load(a.node.config(), &a.node.overrides([])).map_err(|e| e.to_string())?;
    if a.node.print_config() {
        return crate::serve::print_config(&cfg);
    }
    if !a.force_new_group {
        crate::registry_cmd::refuse_if_old_registry_leads(&cfg, old_members(header)).await?;
    }
    let by = format!("holdfast snapshot restore (node {}, as {})", cfg.node_id, crate::registry_cmd::whoami());
    let r = holdfast_registry::recover::restore_from_snapshot(&a.file, &cfg, a.epoch_gap, &by)?;
    println!(
        "registry restored from {} (entry {} of term {}, taken by {}) into {} as node {} (disk {:016x})",
        a.file.display(),
        r.last_index,
        r.last_term,
        header.taken_by,
        cfg.data_dir.display(),
        cfg.node_id,
        r.disk
    );
    crate::registry_cmd::print_recovered(&r, &cfg, a.epoch_gap);
    Ok(())
}

/// A cell's snapshot: the cell is the one the file names, unless --cell says otherwise
/// (which the restore then refuses).
async fn restore_cell(a: RestoreArgs, header: &Header) -> Result<(), String> {
    let cell = a.cell.clone().unwrap_or_else(|| header.group.clone());
    let cfg = CellConfig::load(a.node.config(), &a.node.overrides([("cell", Some(cell))])).map_err(|e| e.to_string())?;
    if a.node.print_config() {
        return crate::serve::print_config(&cfg);
    }
    if !a.force_new_group {
        crate::serve::refuse_if_old_cell_leads(&cfg, old_members(header)).await?;
    }
    let r = holdfast_cell::recover::restore_from_snapshot(&a.file, &cfg)?;
    println!(
        "cell {} restored from {} (entry {} of term {}, taken by {}) into {} as node {} (disk {:016x})",
        cfg.cell,
        a.file.display(),
        r.last_index,
        r.last_term,
        header.taken_by,
        cfg.data_dir.display(),
        cfg.node_id,
        r.disk
    );
    crate::serve::print_cell_recovered(&r, &cfg);
    Ok(())
}

/// The members the snapshot lists (id, Raft address).
fn old_members(header: &Header) -> Vec<(u64, String)> {
    header.members.iter().map(|(id, m)| (*id, m.raft.clone())).collect()
}
