//! `holdfast drill run`: one whole drill on a running playground.
//!
//! 1. Sets up the namespace `drill` (once): one shard per region and a second per
//!    region, each on that region's cell.
//! 2. Starts the observers (ownership watch, holder reads, served shards) and the
//!    workload (SDK workers writing to the fenced resource), and waits until locks are
//!    being granted.
//! 3. Plays the scenario:
//!    - `evacuate`: evacuates `--region` in waves, verifies (owners, safety checker,
//!      the workload re-acquired on the new owners), then rolls it back;
//!    - `partition`: cuts `--region` off (netns), moves its shards away unplanned
//!      (fencing confirmed: the drill cut the region off), kills another cell's leader, heals,
//!      restarts the killed node, and brings the shards home planned.
//! 4. Lets the workload run on, stops everything, checks the whole history and writes
//!    `report.md`, `report.json`, `report.svg` beside `history.jsonl` in `--out`.
//!
//! Exits non-zero on any violation, or if the scenario itself failed.

use super::evacuate::{self, Ctx};
use super::faults;
use super::holder::{self, Holder, HolderSpec};
use super::observe::{self, Owners};
use super::playground::{Playground, Reg};
use super::resource::Resource;
use super::workload::{Spec, Tally, Workload};
use clap::{Args, ValueEnum};
use holdfast_core::ErrorCode;
use holdfast_drills::checker::{self, CheckReport};
use holdfast_drills::history::{EventKind, FaultKind, History};
use holdfast_drills::record::Recorder;
use holdfast_drills::report::DrillReport;
use holdfast_proto::admin::v1 as apb;
use holdfast_proto::lock::v1 as pb;
use holdfast_proto::registry::v1 as rpb;
use holdfast_rpc::status::code_of;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

pub const NS: &str = "drill";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// Evacuate the region under the workload, verify, roll back.
    Evacuate,
    /// Cut the region off (needs `holdfast dev --netns`), fail its shards over
    /// unplanned, kill another cell's leader; heal, restart, bring the shards home.
    Partition,
    /// Real processes stopped and killed: a lock holder SIGSTOPped past its TTL (its
    /// late write must be refused), a cell leader SIGSTOPped past its election timeout,
    /// the whole region SIGKILLed and restarted.
    ProcessFaults,
    /// The registry loses its quorum for `--cut-s` (two of its three voters
    /// SIGSTOPped) under the workload in every region: every region serves on, with no
    /// failed call; a registry write is refused with UNAVAILABLE; after the voters
    /// resume, registry writes work again.
    RegistryOutage,
    /// The registry's majority lost for good (issue #44): two of its three voters
    /// SIGKILLed and their data directories deleted, under the workload in every
    /// region. The third is stopped, formed again alone with `holdfast registry
    /// recover`, restarted; the lost voters come back empty and are added with
    /// `holdfast registry member add`. Every region serves throughout; afterwards every
    /// region grants at the raised epochs, and no shard grants at an old epoch again.
    RegistryLoss,
    /// A cell's majority lost for good (issue #44): of the first region's cell, two
    /// nodes SIGKILLed and their data directories deleted under the workload; the
    /// third stopped, formed again alone with `holdfast cell recover`, restarted; the
    /// lost nodes come back empty and are added with `holdfast cell member add`. The
    /// cell's shards then grant only at epochs above every epoch they granted at
    /// before.
    CellLoss,
    /// A lock holder process SIGSTOPped `--pauses` times, each for a random time
    /// around its TTL (from `--seed`; the first one well past it), while the next
    /// holder waits for the lock; each resumed holder writes with its old token
    /// through the fence. However long the pause, no stale write may be accepted.
    HolderPauses,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Plant {
    /// The fenced resource accepts every write, whatever its token.
    UnfencedResource,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The running playground's data directory.
    #[arg(long, env = "HOLDFAST_PLAYGROUND")]
    pub data_dir: PathBuf,
    #[arg(long, value_enum)]
    pub scenario: Scenario,
    /// The region to evacuate or cut off (default: the first region for `evacuate`,
    /// the last for `partition`).
    #[arg(long)]
    pub region: Option<String>,
    /// Workers taking locks.
    #[arg(long, default_value_t = 12)]
    pub workers: usize,
    /// The workers' session TTL.
    #[arg(long, default_value_t = 2000)]
    pub ttl_ms: u64,
    /// How long the workload runs before and after the scenario.
    #[arg(long, default_value_t = 4)]
    pub settle_s: u64,
    /// How long a region stays cut off (`partition`) or down (`process-faults`).
    #[arg(long, default_value_t = 10)]
    pub cut_s: u64,
    /// `holder-pauses`: how many pauses.
    #[arg(long, default_value_t = 50)]
    pub pauses: u32,
    /// `holder-pauses`: the seed of the pause lengths (printed; replays a run).
    #[arg(long, default_value_t = 15)]
    pub seed: u64,
    /// Plant a bug to prove the checker catches it (the drill then must fail).
    #[arg(long, value_enum)]
    pub plant: Option<Plant>,
    /// Where history.jsonl and the report go (default: <data-dir>/drills/run-<time>).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Checks a history and writes its report into `dir`.
pub fn report(dir: &Path, title: &str, history: &History) -> Result<CheckReport, String> {
    let check = checker::check(history);
    let r = DrillReport::build(title, history, &check);
    for (name, text) in [("report.md", r.to_markdown()), ("report.json", r.to_json()), ("report.svg", r.to_svg())] {
        let f = dir.join(name);
        std::fs::write(&f, text).map_err(|e| format!("{}: {e}", f.display()))?;
    }
    println!("checked {} events: {} violation(s); report in {}", history.events.len(), check.violations.len(), dir.join("report.md").display());
    for v in &check.violations {
        println!("  VIOLATION {}: {}", v.kind, v.summary);
    }
    for m in &check.malformed {
        println!("  history problem: {m}");
    }
    Ok(check)
}

pub async fn run(a: RunArgs) -> Result<(), String> {
    let pg = Playground::load(&a.data_dir)?;
    let out = a.out.clone().unwrap_or_else(|| a.data_dir.join("drills").join(format!("run-{}", std::process::id())));
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let rec = Recorder::create(&out.join("history.jsonl"))?;
    let reg = pg.registry();
    let shards = setup(&reg, &pg).await?;
    println!("drill namespace `{NS}`: shards {}", shards.join(", "));

    let owners = Owners::default();
    let stop = CancellationToken::new();
    let watch = tokio::spawn(observe::watch_ownership(reg.clone(), rec.clone(), owners.clone(), stop.clone()));
    let spec = Spec {
        ns: NS.into(),
        shards: shards.clone(),
        locks_per_shard: 1,
        workers: a.workers,
        ttl: Duration::from_millis(a.ttl_ms),
        gateways: pg.regions.iter().map(|r| pg.gateways(Some(&r.name))).collect(),
    };
    // Holder reads stop before the workload does: stopping workers close their
    // sessions, which ends holds without a release the history could show.
    let stop_reads = CancellationToken::new();
    let holders = tokio::spawn(observe::poll_holders(pg.gateways(None), spec.locks(), rec.clone(), stop_reads.clone()));
    let serving = tokio::spawn(observe::poll_serving(pg.clone(), rec.clone(), stop.clone()));
    wait_for(Duration::from_secs(30), "every drill shard's owner to be known", || shards.iter().all(|s| owners.cell_now(NS, s) != "unknown")).await?;

    let resource = Arc::new(Resource::new("drill-ledger", a.plant == Some(Plant::UnfencedResource)));
    let workload = Workload::start(&spec, rec.clone(), owners.clone(), resource.clone());
    let grants = |h: &History| h.events.iter().filter(|e| matches!(e.kind, EventKind::GrantOk { .. })).count();
    wait_for(Duration::from_secs(30), "the workload's first grants", || grants(&rec.history()) >= shards.len()).await?;
    tokio::time::sleep(Duration::from_secs(a.settle_s)).await;

    let region = match (a.region.clone(), a.scenario) {
        (Some(r), _) => r,
        (None, Scenario::Evacuate | Scenario::HolderPauses | Scenario::RegistryOutage | Scenario::RegistryLoss | Scenario::CellLoss) => {
            pg.regions[0].name.clone()
        }
        (None, Scenario::Partition | Scenario::ProcessFaults) => pg.regions.last().map(|r| r.name.clone()).unwrap_or_default(),
    };
    let ctx = Ctx { reg: reg.clone(), rec: rec.clone(), dir: out.clone(), timeout: Duration::from_secs(180) };
    let scenario = match a.scenario {
        Scenario::Evacuate => evacuate_scenario(&ctx, &pg, &region).await,
        Scenario::Partition => partition_scenario(&ctx, &pg, &region, Duration::from_secs(a.cut_s)).await,
        Scenario::ProcessFaults => process_faults_scenario(&ctx, &pg, &region, &owners, resource.clone(), a.ttl_ms, Duration::from_secs(a.cut_s)).await,
        Scenario::HolderPauses => holder_pauses_scenario(&ctx, &pg, &owners, resource.clone(), a.ttl_ms, a.pauses, a.seed).await,
        Scenario::RegistryOutage => registry_outage_scenario(&ctx, &pg, Duration::from_secs(a.cut_s)).await,
        Scenario::RegistryLoss => super::loss::registry_loss_scenario(&ctx, &pg).await,
        Scenario::CellLoss => super::loss::cell_loss_scenario(&ctx, &pg).await,
    };
    if let Err(e) = &scenario {
        println!("scenario failed: {e}");
    }
    tokio::time::sleep(Duration::from_secs(a.settle_s)).await;

    stop_reads.cancel();
    let _ = holders.await;
    let tally: Tally = workload.stop().await;
    stop.cancel();
    let _ = watch.await;
    for e in serving.await.unwrap_or_default() {
        rec.record(e);
    }
    rec.flush();
    println!(
        "workload: {} grants, {} writes accepted, {} rejected by the fence, {} stalls past the TTL",
        tally.grants, tally.writes_accepted, tally.writes_rejected, tally.stalls
    );
    let title = match a.scenario {
        Scenario::Evacuate => format!("Drill: evacuate {region} under a fenced workload"),
        Scenario::Partition => format!("Drill: {region} cut off, its shards failed over, a cell leader killed"),
        Scenario::ProcessFaults => format!("Drill: a holder and a leader SIGSTOPped, {region} killed and restarted"),
        Scenario::HolderPauses => format!("Drill: a lock holder SIGSTOPped {} times around its TTL (seed {})", a.pauses, a.seed),
        Scenario::RegistryOutage => format!("Drill: the registry's quorum lost for {} s under a fenced workload in every region", a.cut_s),
        Scenario::RegistryLoss => "Drill: the registry's majority lost for good, recovered from one survivor".to_owned(),
        Scenario::CellLoss => {
            format!("Drill: cell {}'s majority lost for good, recovered from one survivor", pg.regions[0].cells.first().map_or("?", |c| c.cell.as_str()))
        }
    };
    let check = report(&out, &title, &rec.history())?;
    scenario?;
    if !check.is_clean() {
        return Err(format!("the safety checker found {} violation(s)", check.violations.len()));
    }
    Ok(())
}

pub(super) async fn wait_for(within: Duration, what: &str, mut cond: impl FnMut() -> bool) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + within;
    while !cond() {
        if tokio::time::Instant::now() > deadline {
            return Err(format!("timed out after {within:?} waiting for {what}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Creates the namespace `drill` and places two shards on each region's cell; what
/// exists already (a rerun) is left as it is, wherever its shards are now.
async fn setup(reg: &Reg, pg: &Playground) -> Result<Vec<String>, String> {
    let config = apb::NamespaceConfig {
        name: NS.into(),
        owner: "drills".into(),
        intent: pb::Intent::Correctness as i32,
        posture: pb::Posture::FailClosed as i32,
        lock_delay_ms: Some(500),
        ..Default::default()
    };
    let known = reg.call(rpb::GetNamespaceRequest { name: NS.into() }, |mut c, r| async move { c.get_namespace(r).await }).await.is_ok();
    if !known {
        reg.call(rpb::CreateNamespaceRequest { config: Some(config) }, |mut c, r| async move { c.create_namespace(r).await })
            .await
            .map_err(|s| format!("cannot create namespace {NS}: {}", s.message()))?;
    }
    let mut shards = Vec::new();
    for (i, r) in pg.regions.iter().enumerate() {
        let Some(cell) = r.cells.first() else { continue };
        for k in 0..2 {
            let shard = format!("s{}", i * 2 + k);
            if reg.owner(NS, &shard).await.is_none() {
                let req = rpb::PlaceShardRequest { ns: NS.into(), shard: shard.clone(), cell: cell.cell.clone() };
                reg.call(req, |mut c, r| async move { c.place_shard(r).await })
                    .await
                    .map_err(|s| format!("cannot place {NS}/{shard} on {}: {}", cell.cell, s.message()))?;
            }
            shards.push(shard);
        }
    }
    Ok(shards)
}

/// Evacuate, verify (including: the workload took locks on every moved shard's new
/// owner), roll back.
async fn evacuate_scenario(ctx: &Ctx, pg: &Playground, region: &str) -> Result<(), String> {
    pg.region(region)?;
    let plan = evacuate::make_plan(&ctx.reg, region, 2, 10_000, Default::default()).await?;
    let ev = evacuate::evacuate(ctx, plan.clone()).await?;
    evacuate::print_outcome(&ev);
    if !ev.succeeded() {
        return Err(format!("the evacuation of {region} did not succeed"));
    }
    // Live workloads re-acquired elsewhere: a grant at a larger epoch on the new owner.
    let moved: Vec<(String, String, u32)> =
        plan.moves().filter(|m| m.ns.as_str() == NS).map(|m| (m.shard.to_string(), m.to_cell.to_string(), m.epoch.0)).collect();
    let rec = ctx.rec.clone();
    let reacquired = || {
        let h = rec.history();
        moved.iter().all(|(shard, cell, epoch)| {
            h.events.iter().any(|e| {
                matches!(&e.kind, EventKind::GrantOk { lock, cell: c, token, .. }
                if lock.ns.as_str() == NS && owners_shard(lock.name.as_str(), shard) && c.as_str() == cell && token.epoch().0 > *epoch)
            })
        })
    };
    wait_for(Duration::from_secs(30), "the workload to take locks on every moved shard's new owner", reacquired).await?;
    println!("every moved shard's workload re-acquired on its new owner at a larger epoch");
    let back = evacuate::rollback(ctx, region).await?;
    evacuate::print_outcome(&back);
    if !back.succeeded() {
        return Err(format!("the rollback to {region} did not succeed"));
    }
    Ok(())
}

/// The registry's quorum lost for `down` (two of three voters SIGSTOPped) while the
/// workload runs in every region. Checks what static stability promises (issue #43):
/// no call of the workload fails while the registry is away, every region keeps
/// granting, a registry write is refused with `UNAVAILABLE`, and once the voters are
/// back a registry write succeeds again. Prints how long that took.
async fn registry_outage_scenario(ctx: &Ctx, pg: &Playground, down: Duration) -> Result<(), String> {
    let voters: Vec<(String, u32)> = pg
        .regions
        .iter()
        .skip(1)
        .take(2)
        .map(|r| Ok((r.registry.name.clone(), r.registry.pid.ok_or(format!("{} has no pid", r.registry.name))?)))
        .collect::<Result<_, String>>()?;
    if voters.len() < 2 {
        return Err("a registry outage needs three regions".into());
    }
    struct Resume(Vec<u32>);
    impl Drop for Resume {
        fn drop(&mut self) {
            for pid in &self.0 {
                let _ = faults::signal("CONT", *pid);
            }
        }
    }
    let from_ms = ctx.rec.ms();
    ctx.rec.record(EventKind::FaultInjected { kind: FaultKind::RegistryQuorumLost, target: "registry".into() });
    for (_, pid) in &voters {
        faults::signal("STOP", *pid)?;
    }
    let resume = Resume(voters.iter().map(|(_, p)| *p).collect());
    println!(
        "registry voters {} stopped: the registry has no quorum for {} s",
        voters.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", "),
        down.as_secs()
    );

    // A registry write is refused, with a clear code.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let probe = |name: &str| {
        let config = apb::NamespaceConfig { name: name.into(), owner: "drills".into(), intent: pb::Intent::Correctness as i32, ..Default::default() };
        rpb::CreateNamespaceRequest { config: Some(config) }
    };
    let write = ctx.reg.call(probe("drill-outage-probe"), |mut c, r| async move { c.create_namespace(r).await }).await;
    let refused = match write {
        Err(s) if code_of(&s) == Some(ErrorCode::Unavailable) => s.message().to_owned(),
        Err(s) => return Err(format!("a registry write during the outage was refused with {:?}, not UNAVAILABLE: {}", code_of(&s), s.message())),
        Ok(_) => return Err("a registry write succeeded while the registry had no quorum".into()),
    };
    println!("a registry write during the outage: UNAVAILABLE ({refused})");
    tokio::time::sleep(down.saturating_sub(Duration::from_secs(2))).await;

    drop(resume);
    let to_ms = ctx.rec.ms();
    ctx.rec.record(EventKind::FaultInjected { kind: FaultKind::Heal, target: "registry".into() });
    let again = registry_writes_work(ctx, "drill-outage-probe-after", Duration::from_secs(30)).await?;
    println!("registry writes work again {} ms after the voters resumed", again.as_millis());

    // Every call of the workload during the outage: no failure, and grants in every region.
    let h = ctx.rec.history();
    let during = h.events.iter().filter(|e| e.t_ms >= from_ms && e.t_ms <= to_ms);
    let (mut grants, mut failed) = (std::collections::BTreeMap::<String, u64>::new(), Vec::new());
    for e in during {
        match &e.kind {
            EventKind::GrantOk { region, .. } => *grants.entry(region.to_string()).or_default() += 1,
            EventKind::GrantFailed { code, .. } if code != "LOCK_HELD" && code != "TIMEOUT" => failed.push(format!("acquire {code}")),
            EventKind::GrantUnknown { .. } => failed.push("acquire: outcome unknown".into()),
            EventKind::ReleaseFailed { code, .. } => failed.push(format!("release {code}")),
            EventKind::ReleaseUnknown { .. } => failed.push("release: outcome unknown".into()),
            _ => {}
        }
    }
    println!("during the outage: grants by region {grants:?}, {} failed call(s)", failed.len());
    if !failed.is_empty() {
        return Err(format!("{} call(s) of the workload failed while the registry was away: {:?}", failed.len(), &failed[..failed.len().min(10)]));
    }
    for r in &pg.regions {
        if grants.get(&r.name).copied().unwrap_or(0) == 0 {
            return Err(format!("region {} granted nothing while the registry was away", r.name));
        }
    }
    Ok(())
}

/// How long until a registry write succeeds (a namespace `name` created, or found).
pub(super) async fn registry_writes_work(ctx: &Ctx, name: &str, within: Duration) -> Result<Duration, String> {
    let started = tokio::time::Instant::now();
    loop {
        let config = apb::NamespaceConfig { name: name.into(), owner: "drills".into(), intent: pb::Intent::Correctness as i32, ..Default::default() };
        let req = rpb::CreateNamespaceRequest { config: Some(config) };
        match ctx.reg.call(req, |mut c, r| async move { c.create_namespace(r).await }).await {
            Ok(_) => return Ok(started.elapsed()),
            Err(s) if code_of(&s) == Some(ErrorCode::AlreadyExists) => return Ok(started.elapsed()),
            Err(_) if started.elapsed() < within => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(s) => return Err(format!("registry writes did not work within {within:?}: {}", s.message())),
        }
    }
}

/// Runs this binary with `args`, as an SRE would type the command; its output is shown.
pub(super) fn holdfast(args: &[String]) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = std::process::Command::new(exe).args(args).output().map_err(|e| e.to_string())?;
    print!("{}", String::from_utf8_lossy(&out.stdout));
    if !out.status.success() {
        return Err(format!("holdfast {} failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(())
}

/// Waits until `pid` has exited.
pub(super) async fn exited(pid: u32, within: Duration) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + within;
    while faults::alive(pid) {
        if tokio::time::Instant::now() > deadline {
            return Err(format!("process {pid} still runs after {within:?}"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Whether a workload lock lives in `shard` (its name is `<shard>-job-<n>`).
pub(super) fn owners_shard(lock: &str, shard: &str) -> bool {
    lock.strip_prefix(shard).is_some_and(|rest| rest.starts_with("-job-"))
}

/// Cut `region` off, fail its shards over (unplanned), kill another cell's leader,
/// heal, restart the killed node, bring the shards home (planned).
async fn partition_scenario(ctx: &Ctx, pg: &Playground, region: &str, cut_for: Duration) -> Result<(), String> {
    let r = pg.region(region)?;
    let home = r.cells.first().ok_or("the region has no cell")?.cell.clone();
    let other = pg.regions.iter().find(|x| x.name != region).ok_or("a partition drill needs two regions")?;
    let target = other.cells.first().ok_or("no target cell")?.cell.clone();
    let list = ctx.reg.list_shards().await.map_err(|s| s.message().to_owned())?;
    let cut_shards: Vec<String> = list.shards.iter().filter(|o| o.ns == NS && o.cell == home).map(|o| o.shard.clone()).collect();

    ctx.rec.record(EventKind::FaultInjected { kind: FaultKind::PartitionRegion, target: region.to_owned() });
    faults::cut(pg, region, true)?;
    println!("{region} cut off; failing its shards {} over to {target} (unplanned)", cut_shards.join(", "));
    // An SRE who cut the region off knows it serves no one: the move need not wait out
    // its ownership lease (35 minutes by default).
    let mut result = failover(ctx, &cut_shards, &target, Failover::FenceConfirmed(format!("drill: {region} cut off (network namespaces)"))).await;

    if result.is_ok() {
        let leader = faults::leader(pg, &target).await;
        match leader {
            Ok(n) => {
                ctx.rec.record(EventKind::FaultInjected { kind: FaultKind::KillCellLeader, target: n.name.clone() });
                println!("killing {} (leader of {target}, pid {:?})", n.name, n.pid);
                result = faults::pid_of(&n).and_then(|p| faults::signal("KILL", p));
            }
            Err(e) => result = Err(e),
        }
    }
    tokio::time::sleep(cut_for).await;
    ctx.rec.record(EventKind::FaultInjected { kind: FaultKind::Heal, target: region.to_owned() });
    faults::cut(pg, region, false)?;
    println!("{region} healed; restarting what was killed");
    faults::restart(&pg.data_dir, Duration::from_secs(60)).await?;
    ctx.rec.record(EventKind::FaultInjected { kind: FaultKind::Heal, target: format!("{target} leader restarted") });
    result?;
    // Home again, planned: the healed cell takes its shards back at a new epoch.
    failover(ctx, &cut_shards, &home, Failover::Planned).await?;
    println!("shards {} back on {home}", cut_shards.join(", "));
    Ok(())
}

/// How a drill moves shards.
enum Failover {
    Planned,
    /// Unplanned, the source's fencing confirmed by the operator (with this reason).
    FenceConfirmed(String),
}

/// Moves `shards` of the drill namespace to `to` and waits until each is active there.
async fn failover(ctx: &Ctx, shards: &[String], to: &str, how: Failover) -> Result<(), String> {
    let (planned, fence_confirmed, reason) = match how {
        Failover::Planned => (true, false, String::new()),
        Failover::FenceConfirmed(reason) => (false, true, reason),
    };
    for shard in shards {
        let req = rpb::MoveShardRequest { ns: NS.into(), shard: shard.clone(), to_cell: to.to_owned(), planned, fence_confirmed, reason: reason.clone() };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            match ctx.reg.move_shard(req.clone()).await {
                Ok(_) => break,
                Err(s) if code_of(&s) == Some(ErrorCode::Moving) => break,
                Err(s) if tokio::time::Instant::now() < deadline && code_of(&s).is_none_or(|c| c == ErrorCode::Unavailable) => {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(s) => return Err(format!("move {NS}/{shard} to {to}: {}", s.message())),
            }
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
        loop {
            let o = ctx.reg.owner(NS, shard).await;
            if o.as_ref().is_some_and(|o| o.cell == to && o.state == rpb::ShardState::Active as i32) {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                return Err(format!("{NS}/{shard} did not arrive on {to} within 90 s"));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    Ok(())
}

/// A holder process SIGSTOPped past its TTL, then resumed to write with its old token;
/// a cell leader SIGSTOPped past its election timeout; `region` SIGKILLed whole and
/// restarted (SIGHUP to `holdfast dev`). The workload runs throughout.
async fn process_faults_scenario(
    ctx: &Ctx,
    pg: &Playground,
    region: &str,
    owners: &Owners,
    resource: Arc<Resource>,
    ttl_ms: u64,
    outage: Duration,
) -> Result<(), String> {
    let rec = &ctx.rec;
    let ledger = holder::serve(resource).await?;
    let gw = pg.regions[0].gateway.grpc.clone();
    let lock = "s0-zombie";
    let spec = HolderSpec { gateway: &gw, ledger: &ledger, ns: NS, shard: "s0", lock, ttl_ms, tls: &pg.tls };
    let mut a = Holder::start(rec.clone(), owners, &spec, Duration::from_secs(30)).await?;
    if a.write("a:1").await != Some(true) {
        return Err("holder A's first write was not accepted".into());
    }
    rec.record(EventKind::FaultInjected { kind: FaultKind::PauseHolder, target: format!("holder A, pid {}", a.pid) });
    faults::signal("STOP", a.pid)?;
    // A stopped process renews nothing: its session may expire from now on.
    rec.record(EventKind::SessionExpired { session: a.session.clone(), at_ms: rec.ms() });
    println!("holder A (pid {}) holds {lock} with token {} and is SIGSTOPped", a.pid, a.token.0);
    let b = Holder::start(rec.clone(), owners, &spec, Duration::from_millis(ttl_ms * 4) + Duration::from_secs(20)).await;
    let resumed = faults::signal("CONT", a.pid);
    rec.record(EventKind::FaultInjected { kind: FaultKind::Heal, target: format!("holder A, pid {}", a.pid) });
    let mut b = b?;
    resumed?;
    println!("holder B got {lock} with token {} after A's session expired", b.token.0);
    if b.token <= a.token {
        return Err(format!("B's token {} is not above A's {}", b.token.0, a.token.0));
    }
    if b.write("b:2").await != Some(true) {
        return Err("holder B's write was not accepted".into());
    }
    let late = a.write("a:3").await;
    println!(
        "A resumed and wrote with its old token: {}",
        match late {
            Some(true) => "ACCEPTED",
            Some(false) => "rejected by the fence",
            None => "no answer",
        }
    );
    a.kill().await;
    b.kill().await;

    let other = pg.regions.iter().find(|r| r.name != region).and_then(|r| r.cells.first()).ok_or("a second region with a cell")?.cell.clone();
    let leader = faults::leader(pg, &other).await?;
    let pid = faults::pid_of(&leader)?;
    rec.record(EventKind::FaultInjected { kind: FaultKind::PauseLeader, target: leader.name.clone() });
    println!("SIGSTOP {} (leader of {other}) past its election timeout", leader.name);
    faults::pause(pid, Duration::from_secs(4)).await?;
    rec.record(EventKind::FaultInjected { kind: FaultKind::Heal, target: leader.name.clone() });

    rec.record(EventKind::FaultInjected { kind: FaultKind::KillRegion, target: region.to_owned() });
    println!("SIGKILL every process of {region} for {outage:?}");
    for pid in faults::region_pids(pg, region)? {
        let _ = faults::signal("KILL", pid);
    }
    tokio::time::sleep(outage).await;
    faults::restart(&pg.data_dir, Duration::from_secs(90)).await?;
    rec.record(EventKind::FaultInjected { kind: FaultKind::Heal, target: format!("{region} restarted") });
    let cell = pg.region(region)?.cells.first().ok_or("the region has no cell")?.cell.clone();
    faults::leader(&Playground::load(&pg.data_dir)?, &cell).await?;
    println!("{region} restarted; {cell} has a leader again");
    Ok(())
}

/// `pauses` times: the current holder of one lock is SIGSTOPped for a random time in
/// [TTL/2, 3 TTL/2) (the first pause: 2 TTL, so every run has a zombie), while the next
/// holder process waits for the lock and writes as soon as it has it; then the stopped
/// one resumes, writes with its old token, and is killed. A pause shorter than the
/// lease leaves the first holder the holder (its write is legitimate); a longer one
/// lets the next holder in first, and the late write must be refused by the fence.
async fn holder_pauses_scenario(
    ctx: &Ctx,
    pg: &Playground,
    owners: &Owners,
    resource: Arc<Resource>,
    ttl_ms: u64,
    pauses: u32,
    seed: u64,
) -> Result<(), String> {
    let rec = &ctx.rec;
    let ledger = holder::serve(resource).await?;
    let gw = pg.regions[0].gateway.grpc.clone();
    let spec = HolderSpec { gateway: &gw, ledger: &ledger, ns: NS, shard: "s0", lock: "s0-pauses", ttl_ms, tls: &pg.tls };
    println!("holder pauses: {pauses}, seed {seed}");
    let mut rng = seed;
    let mut a = Holder::start(rec.clone(), owners, &spec, Duration::from_secs(30)).await?;
    let (mut accepted_late, mut refused_late) = (0, 0);
    for i in 0..pauses {
        a.write(&format!("{i}:before")).await;
        rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let pause = Duration::from_millis(if i == 0 { 2 * ttl_ms } else { ttl_ms / 2 + (rng >> 33) % ttl_ms });
        rec.record(EventKind::FaultInjected { kind: FaultKind::PauseHolder, target: format!("holder pid {}, {} ms", a.pid, pause.as_millis()) });
        faults::signal("STOP", a.pid)?;
        // A stopped process renews nothing: its session may expire from now on.
        rec.record(EventKind::SessionExpired { session: a.session.clone(), at_ms: rec.ms() });
        let next = async {
            let mut b = Holder::start(rec.clone(), owners, &spec, pause + Duration::from_millis(4 * ttl_ms) + Duration::from_secs(10)).await?;
            b.write(&format!("{i}:next")).await;
            Ok::<_, String>(b)
        };
        let mut stopped = a;
        let zombie = async move {
            tokio::time::sleep(pause).await;
            let resumed = faults::signal("CONT", stopped.pid);
            rec.record(EventKind::FaultInjected { kind: FaultKind::Heal, target: format!("holder pid {}", stopped.pid) });
            let late = stopped.write(&format!("{i}:late")).await;
            // Killed after its late write: the next holder gets the lock at the
            // latest when this session's lease runs out.
            stopped.kill().await;
            resumed.map(|()| late)
        };
        let (b, late) = tokio::join!(next, zombie);
        match late? {
            Some(true) => accepted_late += 1,
            Some(false) => refused_late += 1,
            None => {}
        }
        a = b?;
    }
    a.kill().await;
    println!("late writes after a pause: {accepted_late} accepted (still the holder), {refused_late} refused by the fence");
    Ok(())
}
