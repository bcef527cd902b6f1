//! `holdfast region failover <region>`: a lost region's shards brought back in one
//! command (issue #43). Every shard homed in the region's cells moves to a cell of
//! another active region, as an **unplanned** move (the source cannot seal), planned
//! by the evacuation planner (`holdfast_drills::plan`: the load spread over the
//! surviving cells, a namespace's `--fallback` region first) and run in waves.
//!
//! Without `--fence-confirmed` each move completes once the source's ownership lease
//! has run out (35 minutes by default: the region may still be serving its clients).
//! With it — the operator has confirmed the region's cells are down or cut off from
//! every client, like a Kubernetes force delete — every move completes at once, its
//! reason written to the registry's audit log first (docs/guarantees.md says what
//! holds then and what does not).
//!
//! Its state is the registry's: a shard still homed in the region and active is to
//! move, one moving away from it is in flight, one homed elsewhere is done. So a run
//! interrupted (or started again from another machine) picks up where the registry
//! is, and `--abort` aborts the moves in flight from anywhere: each shard stays with its
//! one owner.

use super::evacuate::{fallbacks, make_plan, unix_ms};
use super::playground::{Playground, Reg};
use clap::Args;
use holdfast_core::{CellId, Epoch, NamespaceName, RegionId, ShardName};
use holdfast_drills::history::EventKind;
use holdfast_drills::record::Recorder;
use holdfast_proto::registry::v1 as rpb;
use holdfast_rpc::status::{code_of, one_line};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

const POLL: Duration = Duration::from_millis(250);
/// Moves sent to the registry at once.
const IN_FLIGHT: usize = 32;

#[derive(Debug, Args)]
pub struct FailoverArgs {
    /// The lost region.
    pub region: String,
    /// The deployment's gateways (those of the surviving regions), comma-separated.
    /// With neither this nor --data-dir: the playground's.
    #[arg(long = "endpoints", visible_alias = "endpoint", env = "HOLDFAST_ENDPOINTS")]
    pub endpoints: Option<String>,
    /// A playground's data directory, used when --endpoints is not given.
    #[arg(long, env = "HOLDFAST_PLAYGROUND")]
    pub data_dir: Option<PathBuf>,
    #[command(flatten)]
    pub tls: crate::remote::ClientTls,
    /// You have confirmed the region's cells are down or cut off from every client: the
    /// moves complete at once instead of after their ownership lease. Audited with
    /// --reason.
    #[arg(long, requires = "reason")]
    pub fence_confirmed: bool,
    /// Why the fencing is confirmed (the audit log records it with every move).
    #[arg(long)]
    pub reason: Option<String>,
    /// The most moves started together.
    #[arg(long, default_value_t = 100)]
    pub max_wave: usize,
    /// The load a target cell may carry (docs/drills.md, "The plan").
    #[arg(long, default_value_t = 10_000)]
    pub capacity: u64,
    /// NS=REGION: the region a namespace's shards go to first (repeat per namespace).
    #[arg(long = "fallback", value_name = "NS=REGION")]
    pub fallback: Vec<String>,
    /// Print the plan and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Abort the moves in flight away from the region (from any machine); every shard
    /// stays with one owner.
    #[arg(long, conflicts_with_all = ["dry_run", "fence_confirmed"])]
    pub abort: bool,
    /// Where the history and the report go (default: <data-dir>/drills/failover-<region>-<time>,
    /// or ~/.holdfast/drills/... with --endpoints).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Give up after this many seconds (default: long enough to wait out a 35-minute lease).
    #[arg(long, default_value_t = 2_200)]
    pub timeout_s: u64,
}

/// One shard as the registry lists it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    ns: String,
    shard: String,
}

pub async fn run(a: FailoverArgs) -> Result<(), String> {
    let (reg, default_dir) = match (&a.endpoints, &a.data_dir) {
        (Some(endpoints), _) => {
            crate::remote::transport(&a.tls)?;
            let home = std::env::var_os("HOME").map(PathBuf::from).ok_or("HOME is not set: pass --out")?;
            (Reg::new(crate::remote::endpoint_list(endpoints)?), home.join(".holdfast/drills"))
        }
        (None, Some(data_dir)) => (Playground::load(data_dir)?.registry(), data_dir.join("drills")),
        (None, None) => return Err("which deployment? pass --endpoints (gateways), or --data-dir for a playground (HOLDFAST_PLAYGROUND)".into()),
    };
    let cells = cells_of(&reg, &a.region).await?;
    if a.abort {
        return abort(&reg, &cells).await;
    }
    let fallback = fallbacks(&a.fallback)?;
    let started = Instant::now();
    // Nothing new goes to the lost region meanwhile (moves into it are refused too).
    set_draining(&reg, &a.region).await?;
    let plan = match make_plan(&reg, &a.region, a.max_wave, a.capacity, fallback).await {
        Ok(p) => Some(p),
        // Resumed after every move began: only the ones in flight are left to wait for.
        Err(e) if e.starts_with("nothing to move") => None,
        Err(e) => return Err(e),
    };
    if a.dry_run {
        match &plan {
            Some(p) => println!("{}", p.to_markdown()),
            None => println!("nothing to move: no shard is homed in {} (moves in flight: see `holdfast shard list`)", a.region),
        }
        println!("(dry run: nothing changed)");
        return Ok(());
    }
    let dir = a.out.clone().unwrap_or_else(|| default_dir.join(format!("failover-{}-{}", a.region, unix_ms())));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let rec = Recorder::create(&dir.join("history.jsonl"))?;
    if let Some(p) = &plan {
        std::fs::write(dir.join("plan.md"), p.to_markdown()).map_err(|e| e.to_string())?;
    }
    let how =
        if a.fence_confirmed { "fencing confirmed: each move completes at once" } else { "each move completes once the source's ownership lease has run out" };
    println!("failing {} over ({how}); report in {}", a.region, dir.display());
    let deadline = Instant::now() + Duration::from_secs(a.timeout_s);
    let reason = a.reason.clone().unwrap_or_default();
    let mut moved = 0usize;
    // Moves already in flight (an earlier run) are waited for with the first wave.
    let mut in_flight = moving_away(&reg, &cells).await?;
    let waves = plan.as_ref().map(|p| p.waves.clone()).unwrap_or_default();
    let total = waves.iter().map(|w| w.moves.len()).sum::<usize>() + in_flight.len();
    for (i, wave) in waves.iter().enumerate() {
        rec.record(EventKind::WaveStarted { wave: i as u32 });
        let begun = Instant::now();
        // A wave's moves are sent IN_FLIGHT at a time: the registry's Raft log takes
        // concurrent proposals in one append, where one at a time paid a commit (three,
        // with the fence confirmed: the audit record, the begin, the completion) each.
        let mut sent = tokio::task::JoinSet::new();
        let mut moves = wave.moves.iter();
        loop {
            while sent.len() < IN_FLIGHT {
                let Some(m) = moves.next() else { break };
                let req = rpb::MoveShardRequest {
                    ns: m.ns.to_string(),
                    shard: m.shard.to_string(),
                    to_cell: m.to_cell.to_string(),
                    planned: false,
                    fence_confirmed: a.fence_confirmed,
                    reason: reason.clone(),
                };
                let reg = reg.clone();
                sent.spawn(async move { (reg.move_shard(req.clone()).await, req) });
            }
            let Some(done) = sent.join_next().await else { break };
            let (answer, req) = done.map_err(|e| format!("a move's task failed: {e}"))?;
            match answer {
                Ok(_) => {}
                // Moving already: an earlier run began it.
                Err(s) if code_of(&s) == Some(holdfast_core::ErrorCode::Moving) => {}
                Err(s) => return Err(format!("moving {}/{} to {}: {}", req.ns, req.shard, req.to_cell, one_line(&s))),
            }
            in_flight.insert(Key { ns: req.ns, shard: req.shard });
        }
        moved += settle(&reg, &cells, &mut in_flight, &rec, deadline).await?;
        rec.record(EventKind::WaveEnded { wave: i as u32 });
        println!("wave {}/{}: {} moves done in {} ms ({moved}/{total} shards moved)", i + 1, waves.len(), wave.moves.len(), begun.elapsed().as_millis());
    }
    moved += settle(&reg, &cells, &mut in_flight, &rec, deadline).await?;
    rec.flush();
    let loads = shard_counts(&reg).await?;
    println!("failover of {} done: {moved} shards moved in {} ms; shards per cell now {loads:?}", a.region, started.elapsed().as_millis());
    let check = super::run::report(&dir, &format!("failover of {}", a.region), &rec.history())?;
    if !check.is_clean() {
        return Err(format!("the report found {} violation(s); see {}", check.violations.len(), dir.display()));
    }
    Ok(())
}

/// Waits until every shard of `in_flight` is active outside `cells` (each recorded as
/// it lands); returns how many landed.
async fn settle(reg: &Reg, cells: &BTreeSet<String>, in_flight: &mut BTreeSet<Key>, rec: &Recorder, deadline: Instant) -> Result<usize, String> {
    let mut landed = 0;
    let mut last_report = Instant::now();
    while !in_flight.is_empty() {
        for o in reg.list_shards().await.map_err(|s| one_line(&s))?.shards {
            let key = Key { ns: o.ns.clone(), shard: o.shard.clone() };
            if in_flight.contains(&key) && o.state == rpb::ShardState::Active as i32 && !cells.contains(&o.cell) {
                in_flight.remove(&key);
                landed += 1;
                if let (Ok(ns), Ok(shard), Ok(cell)) = (NamespaceName::new(o.ns.as_str()), ShardName::new(o.shard.as_str()), CellId::new(o.cell.as_str())) {
                    rec.record(EventKind::ShardTransferred { ns, shard, cell, epoch: Epoch(o.epoch) });
                }
            }
        }
        if in_flight.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("{} move(s) still in flight at the timeout; run again to wait on, or --abort", in_flight.len()));
        }
        if last_report.elapsed() > Duration::from_secs(30) {
            println!("  {} move(s) waiting for their source's ownership lease to run out", in_flight.len());
            last_report = Instant::now();
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(landed)
}

/// The names of `region`'s cells.
async fn cells_of(reg: &Reg, region: &str) -> Result<BTreeSet<String>, String> {
    RegionId::new(region).map_err(|e| e.to_string())?;
    let cells: BTreeSet<String> = reg.list_cells().await.map_err(|s| one_line(&s))?.into_iter().filter(|c| c.region == region).map(|c| c.cell).collect();
    if cells.is_empty() {
        return Err(format!("region {region} has no cell in the registry"));
    }
    Ok(cells)
}

/// Shards moving away from `cells` now.
async fn moving_away(reg: &Reg, cells: &BTreeSet<String>) -> Result<BTreeSet<Key>, String> {
    Ok(reg
        .list_shards()
        .await
        .map_err(|s| one_line(&s))?
        .shards
        .into_iter()
        .filter(|o| o.state == rpb::ShardState::Moving as i32 && cells.contains(&o.cell))
        .map(|o| Key { ns: o.ns, shard: o.shard })
        .collect())
}

/// Aborts every move away from `cells`: each shard stays where it is.
async fn abort(reg: &Reg, cells: &BTreeSet<String>) -> Result<(), String> {
    let list = reg.list_shards().await.map_err(|s| one_line(&s))?.shards;
    let mut n = 0;
    for o in list.iter().filter(|o| o.state == rpb::ShardState::Moving as i32 && cells.contains(&o.cell)) {
        let req = rpb::AbortMoveRequest { ns: o.ns.clone(), shard: o.shard.clone(), epoch: o.epoch };
        match reg.call(req, |mut c, r| async move { c.abort_move(r).await }).await {
            Ok(_) => n += 1,
            Err(s) => println!("  {}/{}: not aborted ({}); it may have completed", o.ns, o.shard, one_line(&s)),
        }
    }
    println!("aborted {n} move(s) in flight; every shard has one owner");
    Ok(())
}

async fn set_draining(reg: &Reg, region: &str) -> Result<(), String> {
    let req = rpb::SetRegionStateRequest { region: region.to_owned(), state: rpb::RegionState::Draining as i32 };
    reg.call(req, |mut c, r| async move { c.set_region_state(r).await }).await.map(|_| ()).map_err(|s| one_line(&s))
}

/// Shards per cell now.
async fn shard_counts(reg: &Reg) -> Result<BTreeMap<String, usize>, String> {
    let mut m = BTreeMap::new();
    for o in reg.list_shards().await.map_err(|s| one_line(&s))?.shards {
        *m.entry(o.cell).or_default() += 1;
    }
    Ok(m)
}
