//! The drills of a group's majority lost for good (issue #44), each step the command an
//! SRE types: `registry-loss` (docs/runbooks/disaster-recovery.md) with the snapshots
//! taken beforehand, and `cell-loss` (docs/runbooks/cell-quorum-lost.md).

use super::evacuate::Ctx;
use super::faults;
use super::playground::{Node, Playground};
use super::run::{exited, holdfast, owners_shard, registry_writes_work, wait_for, NS};
use holdfast_drills::history::{EventKind, FaultKind, History};
use std::path::Path;
use std::time::Duration;

/// The registry's majority lost for good, then formed again from the survivor (issue
/// #44; docs/runbooks/disaster-recovery.md, each step the command an SRE types).
pub(super) async fn registry_loss_scenario(ctx: &Ctx, pg: &Playground) -> Result<(), String> {
    if pg.regions.len() < 3 {
        return Err("a registry loss needs three regions".into());
    }
    let survivor = pg.regions[0].registry.clone();
    let lost: Vec<_> = pg.regions[1..3].iter().map(|r| r.registry.clone()).collect();
    let before_ms = ctx.rec.ms();
    let highest_epoch_before = ctx
        .rec
        .history()
        .events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::GrantOk { token, .. } => Some(token.epoch().0),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    // 1. The backups an SRE takes beforehand: the registry's and a cell's snapshots.
    snapshots(pg, &survivor)?;
    ctx.rec.record(EventKind::FaultInjected { kind: FaultKind::RegistryQuorumLost, target: "registry: two voters lost for good".into() });
    lose_for_good(&lost).await?;
    println!("registry voters {} killed and their data directories deleted", lost.iter().map(|v| v.name.as_str()).collect::<Vec<_>>().join(", "));

    // 2. Stop the survivor; 3. recover it into a new directory; 4. start it there.
    recover_in_place("registry", &survivor, &[]).await?;
    let recover_ms = ctx.rec.ms();
    faults::restart(&pg.data_dir, Duration::from_secs(60)).await?;
    let took = registry_writes_work(ctx, "drill-recovery-probe", Duration::from_secs(60)).await?;
    println!("the recovered registry takes writes {} ms after its restart", took.as_millis());

    // 5. The lost voters, back on empty directories, join the new registry.
    add_back(pg, "registry", &survivor, &lost, &[])?;
    ctx.rec.record(EventKind::FaultInjected { kind: FaultKind::Heal, target: "registry recovered, voters added back".into() });

    // Every region grants at a raised epoch, and no shard at an old one after that.
    let raised = |e: u32| e > highest_epoch_before;
    let rec = ctx.rec.clone();
    let regions: Vec<String> = pg.regions.iter().map(|r| r.name.clone()).collect();
    wait_for(Duration::from_secs(60), "every region's grants at a raised epoch", || {
        let h = rec.history();
        regions.iter().all(|name| {
            h.events.iter().any(|e| matches!(&e.kind, EventKind::GrantOk { region, token, .. } if region.as_str() == name && raised(token.epoch().0)))
        })
    })
    .await?;
    let h = ctx.rec.history();
    let old_after = old_epoch_after_raised(&h, recover_ms, raised, |lock| lock.split("-job-").next().map(str::to_owned));
    let grants_during = h.events.iter().filter(|e| e.t_ms >= before_ms && e.t_ms <= recover_ms && matches!(e.kind, EventKind::GrantOk { .. })).count();
    println!(
        "grants while the registry was lost: {grants_during}; highest epoch before {highest_epoch_before}, every region now at a raised epoch; {} old-epoch grant(s) after a raised one",
        old_after.len()
    );
    if !old_after.is_empty() {
        return Err(format!("shards granted at an old epoch after a raised one: {:?}", &old_after[..old_after.len().min(5)]));
    }
    Ok(())
}

/// The voter's own TLS flags, from its command line.
fn server_tls(node: &Node) -> Vec<String> {
    let argv = &node.argv;
    match argv.iter().position(|a| a == "--certs-dir") {
        Some(i) => vec!["--certs-dir".to_owned(), argv.get(i + 1).cloned().unwrap_or_default()],
        None if argv.iter().any(|a| a == "--insecure") => vec!["--insecure".into()],
        None => vec![],
    }
}

/// Saves the registry's snapshot (through the first gateway) and the first cell's
/// (from its nodes), checks both with `snapshot inspect`, and shows both restorable:
/// refused while the group has a leader, then restored (with --force-new-group) into
/// scratch directories no node runs on.
fn snapshots(pg: &Playground, voter: &Node) -> Result<(), String> {
    let first = pg.regions.first().ok_or("no region")?;
    let cell = first.cells.first().ok_or("the first region has no cell")?;
    let dir = pg.data_dir.join("drill-snapshots");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let registry_file = dir.join("registry.snap");
    let cell_file = dir.join(format!("{}.snap", cell.cell));
    for (which, file) in [(vec!["--registry".to_owned()], &registry_file), (vec!["--cell".to_owned(), cell.cell.clone()], &cell_file)] {
        let mut args: Vec<String> = ["snapshot", "save"].map(String::from).into();
        args.extend(which);
        args.extend(["-o".to_owned(), file.display().to_string(), "--endpoints".to_owned(), first.gateway.grpc.clone()]);
        args.extend(pg.tls.args());
        holdfast(&args)?;
        holdfast(&["snapshot".to_owned(), "inspect".to_owned(), file.display().to_string()])?;
    }
    let cell_node = cell.nodes.first().ok_or("the cell has no node")?;
    restorable(&registry_file, &dir.join("registry-restored"), voter, "the registry")?;
    restorable(&cell_file, &dir.join("cell-restored"), cell_node, &format!("cell {}", cell.cell))
}

/// `snapshot restore FILE` as `node` into `into`: refused while the group leads, then
/// done with --force-new-group (nothing runs on `into`).
fn restorable(file: &Path, into: &Path, node: &Node, what: &str) -> Result<(), String> {
    let mut restore: Vec<String> = ["snapshot", "restore"].map(String::from).into();
    restore.push(file.display().to_string());
    for (flag, value) in [
        ("--data-dir", into.display().to_string()),
        ("--node-id", node.node_id.to_string()),
        ("--raft-addr", node.raft.clone()),
        ("--client-addr", node.client.clone()),
    ] {
        restore.extend([flag.to_owned(), value]);
    }
    restore.extend(server_tls(node));
    match holdfast(&restore) {
        Err(e) if e.contains("may still have a quorum") => println!("a restore of {what} while it leads is refused"),
        Err(e) => return Err(e),
        Ok(()) => return Err(format!("a restore of {what} was not refused while it has a leader")),
    }
    restore.push("--force-new-group".into());
    holdfast(&restore)
}

/// The first region's cell loses its majority for good under the workload: two of its
/// nodes SIGKILLed and their data directories deleted, the third stopped and formed
/// again alone with `holdfast cell recover` (every shard of its copy sealed), restarted
/// on the new directory, the two brought back empty and added with `holdfast cell
/// member add`. Fails unless the cell's shards grant again, each at an epoch above
/// every epoch it granted at before, and none at an old epoch after a raised one.
pub(super) async fn cell_loss_scenario(ctx: &Ctx, pg: &Playground) -> Result<(), String> {
    let region = pg.regions.first().ok_or("no region")?;
    let cell = region.cells.first().ok_or("the first region has no cell")?;
    if cell.nodes.len() < 3 {
        return Err(format!("cell {} has {} nodes; a cell loss needs three", cell.cell, cell.nodes.len()));
    }
    let list = ctx.reg.list_shards().await.map_err(|s| s.message().to_owned())?;
    let shards: Vec<String> = list.shards.iter().filter(|o| o.ns == NS && o.cell == cell.cell).map(|o| o.shard.clone()).collect();
    if shards.is_empty() {
        return Err(format!("cell {} owns no shard of {NS}", cell.cell));
    }
    let in_cell = |lock: &str| shards.iter().any(|s| owners_shard(lock, s));
    let highest_before = ctx
        .rec
        .history()
        .events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::GrantOk { lock, token, .. } if in_cell(lock.name.as_str()) => Some(token.epoch().0),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    let (survivor, lost) = (&cell.nodes[0], &cell.nodes[1..3]);
    ctx.rec.record(EventKind::FaultInjected { kind: FaultKind::CellMajorityLost, target: format!("{}: two nodes lost for good", cell.cell) });
    lose_for_good(lost).await?;
    println!("{} nodes {} killed and their data directories deleted", cell.cell, lost.iter().map(|n| n.name.as_str()).collect::<Vec<_>>().join(", "));

    // Stop the survivor; recover it into a new directory; start it there.
    recover_in_place("cell", survivor, &["--cell".to_owned(), cell.cell.clone()]).await?;
    let recover_ms = ctx.rec.ms();
    faults::restart(&pg.data_dir, Duration::from_secs(60)).await?;
    let restarted = tokio::time::Instant::now();

    // Every shard of the cell grants at a raised epoch (the recovered node alone is a
    // quorum of its new group), and none at an old one after.
    let raised = |e: u32| e > highest_before;
    let rec = ctx.rec.clone();
    wait_for(Duration::from_secs(60), "every shard of the recovered cell granting at a raised epoch", || {
        let h = rec.history();
        shards.iter().all(|s| {
            h.events.iter().any(|e| matches!(&e.kind, EventKind::GrantOk { lock, token, .. } if owners_shard(lock.name.as_str(), s) && raised(token.epoch().0)))
        })
    })
    .await?;
    println!("the workload's first grants at a raised epoch in every shard of {} came {} ms after its restart", cell.cell, restarted.elapsed().as_millis());

    // The lost nodes, back on empty directories, join the recovered cell (and the
    // registry's record of it is updated, through the region's gateway).
    let record = ["--cell", &cell.cell, "--region", &region.name, "--endpoints", &region.gateway.grpc].map(String::from);
    add_back(pg, "cell", survivor, lost, &record)?;
    ctx.rec.record(EventKind::FaultInjected { kind: FaultKind::Heal, target: format!("{} recovered, nodes added back", cell.cell) });
    let h = ctx.rec.history();
    let old_after = old_epoch_after_raised(&h, recover_ms, raised, |lock| shards.iter().find(|s| owners_shard(lock, s)).cloned());
    println!(
        "cell {}: highest epoch granted before {highest_before}, every shard ({}) now at a raised epoch; {} old-epoch grant(s) after a raised one",
        cell.cell,
        shards.join(", "),
        old_after.len()
    );
    if !old_after.is_empty() {
        return Err(format!("shards granted at an old epoch after a raised one: {:?}", &old_after[..old_after.len().min(5)]));
    }
    Ok(())
}

/// SIGKILLs `nodes` and deletes their data directories.
async fn lose_for_good(nodes: &[Node]) -> Result<(), String> {
    for n in nodes {
        faults::signal("KILL", faults::pid_of(n)?)?;
        exited(faults::pid_of(n)?, Duration::from_secs(10)).await?;
        std::fs::remove_dir_all(&n.data_dir).map_err(|e| format!("{}: {e}", n.data_dir.display()))?;
    }
    Ok(())
}

/// Stops `survivor`, runs `holdfast <group> recover --from <its directory>` (with
/// `extra` flags) into a new directory, puts that in place of the old one (kept beside
/// it as `.lost`); the caller restarts it.
async fn recover_in_place(group: &str, survivor: &Node, extra: &[String]) -> Result<(), String> {
    faults::signal("TERM", faults::pid_of(survivor)?)?;
    exited(faults::pid_of(survivor)?, Duration::from_secs(20)).await?;
    let recovered = survivor.data_dir.with_extension("recovered");
    let mut args: Vec<String> = vec![group.to_owned(), "recover".into(), "--from".into(), survivor.data_dir.display().to_string()];
    for (flag, value) in [
        ("--data-dir", recovered.display().to_string()),
        ("--node-id", survivor.node_id.to_string()),
        ("--raft-addr", survivor.raft.clone()),
        ("--client-addr", survivor.client.clone()),
    ] {
        args.extend([flag.to_owned(), value]);
    }
    args.extend(extra.iter().cloned());
    args.extend(server_tls(survivor));
    holdfast(&args)?;
    std::fs::rename(&survivor.data_dir, survivor.data_dir.with_extension("lost")).map_err(|e| e.to_string())?;
    std::fs::rename(&recovered, &survivor.data_dir).map_err(|e| e.to_string())
}

/// `holdfast <group> member add` of each of `lost` (back on empty directories) at
/// `survivor`, with `extra` flags.
fn add_back(pg: &Playground, group: &str, survivor: &Node, lost: &[Node], extra: &[String]) -> Result<(), String> {
    for n in lost {
        let mut args: Vec<String> = vec![group.to_owned(), "member".into(), "add".into(), "--raft-endpoint".into(), survivor.raft.clone()];
        args.extend(["--member".into(), format!("{}={},{}", n.node_id, n.raft, n.client)]);
        args.extend(extra.iter().cloned());
        args.extend(pg.tls.args());
        holdfast(&args)?;
    }
    Ok(())
}

/// The grants from `since_ms` on at an epoch `raised` says is old, of a shard that had
/// already granted at a raised one (`shard_of` names a lock's shard).
fn old_epoch_after_raised(h: &History, since_ms: u64, raised: impl Fn(u32) -> bool, shard_of: impl Fn(&str) -> Option<String>) -> Vec<String> {
    let mut first_raised = std::collections::BTreeMap::new();
    let mut old_after = Vec::new();
    for e in h.events.iter().filter(|e| e.t_ms >= since_ms) {
        let EventKind::GrantOk { lock, token, .. } = &e.kind else { continue };
        let Some(shard) = shard_of(lock.name.as_str()) else { continue };
        if raised(token.epoch().0) {
            first_raised.entry(shard).or_insert(e.t_ms);
        } else if first_raised.get(&shard).is_some_and(|t| *t <= e.t_ms) {
            old_after.push(format!("{} token {:#x}", lock.name, token.0));
        }
    }
    old_after
}
