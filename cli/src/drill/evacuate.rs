//! `holdfast drill evacuate`: the runtime of `holdfast_drills::evacuation`.
//!
//! The state machine decides; this module performs its actions against the registry
//! (through any gateway that answers), feeds back what it observes, and saves the
//! progress after every step (`<state-dir>/evacuate.json`, or `rollback.json`), so a
//! driver killed half-way is resumed by the next run, and `--abort` from another
//! terminal (or after a crash) stops it leaving every shard with exactly one owner.
//!
//! Region state: the evacuated region is set `draining` before the first wave (the
//! registry then places nothing new there), `evacuated` when verified, and `active`
//! again on an abort or before a rollback.

use super::playground::{channel, Playground, Reg};
use clap::Args;
use holdfast_core::ErrorCode;
use holdfast_core::{CellId, Epoch, NamespaceName, RegionId, ShardName};
use holdfast_drills::evacuation::{verify_owners, Action, Evacuation, Input, OwnerView, Phase, ShardState};
use holdfast_drills::history::EventKind;
use holdfast_drills::plan::{self, CellInfo, Plan, PlanKind, PlanRequest, RegionInfo, RegionState, ShardPlacement};
use holdfast_drills::record::Recorder;
use holdfast_proto::admin::v1 as apb;
use holdfast_proto::admin::v1::cell_admin_client::CellAdminClient;
use holdfast_proto::raft::v1 as raftpb;
use holdfast_proto::raft::v1::raft_admin_client::RaftAdminClient;
use holdfast_proto::registry::v1 as rpb;
use holdfast_rpc::status::code_of;
use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

const POLL: Duration = Duration::from_millis(250);
/// How long a wave's targets may stay unhealthy before the evacuation aborts.
const HEALTH_GATE: Duration = Duration::from_secs(30);

#[derive(Debug, Args)]
pub struct EvacuateArgs {
    /// The deployment's gateways (any regions'; those of the region being emptied may
    /// be down), comma-separated. With neither this nor --data-dir: the playground's.
    #[arg(long = "endpoints", visible_alias = "endpoint", env = "HOLDFAST_ENDPOINTS")]
    pub endpoints: Option<String>,
    /// A playground's data directory (its endpoints.json says where the gateways are),
    /// used when --endpoints is not given.
    #[arg(long, env = "HOLDFAST_PLAYGROUND")]
    pub data_dir: Option<PathBuf>,
    #[command(flatten)]
    pub tls: crate::remote::ClientTls,
    /// The region to empty (or, with --rollback, to bring shards back to).
    #[arg(long)]
    pub region: String,
    /// The most shard moves in one wave.
    #[arg(long, default_value_t = 2)]
    pub max_wave: usize,
    /// The load a target cell may carry across its shards: each shard weighs 1 + its
    /// keys + its sessions + its grants per second (docs/drills.md, "The plan").
    #[arg(long, visible_alias = "capacity-keys", default_value_t = 10_000)]
    pub capacity: u64,
    /// NS=REGION: the region a namespace's shards go to first, while a cell there has
    /// room (repeat per namespace).
    #[arg(long = "fallback", value_name = "NS=REGION")]
    pub fallback: Vec<String>,
    /// Print the plan and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Stop the evacuation (running in another process, or interrupted): moves in
    /// flight are aborted, every shard stays with one owner.
    #[arg(long, conflicts_with_all = ["dry_run", "rollback"])]
    pub abort: bool,
    /// Bring the evacuated shards home (every shard of the last evacuation's plan that
    /// is not at its home cell).
    #[arg(long, conflicts_with = "dry_run")]
    pub rollback: bool,
    /// Plan, progress, history and report; a second run with the same one resumes
    /// (default: <data-dir>/drills/evacuate-<region> for a playground,
    /// ~/.holdfast/drills/evacuate-<region> for --endpoints).
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// Give up (and abort) after this many seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout_s: u64,
}

pub async fn run(a: EvacuateArgs) -> Result<(), String> {
    let (reg, default_dir) = match (&a.endpoints, &a.data_dir) {
        (Some(endpoints), _) => {
            // The first use sets how this process calls the deployment (the drill's
            // other calls, to cells' nodes, go the same way).
            crate::remote::transport(&a.tls)?;
            let home = std::env::var_os("HOME").map(PathBuf::from).ok_or("HOME is not set: pass --state-dir")?;
            (Reg::new(crate::remote::endpoint_list(endpoints)?), home.join(".holdfast/drills"))
        }
        (None, Some(data_dir)) => (Playground::load(data_dir)?.registry(), data_dir.join("drills")),
        (None, None) => return Err("which deployment? pass --endpoints (gateways), or --data-dir for a playground (HOLDFAST_PLAYGROUND)".into()),
    };
    let dir = a.state_dir.clone().unwrap_or_else(|| default_dir.join(format!("evacuate-{}", a.region)));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    println!("state: {}", dir.display());
    let rec = Recorder::create(&dir.join(format!("history-{}.jsonl", unix_ms())))?;
    let ctx = Ctx { reg, rec: rec.clone(), dir: dir.clone(), timeout: Duration::from_secs(a.timeout_s) };
    let ev = if a.abort {
        abort(&ctx).await?
    } else if a.rollback {
        rollback(&ctx, &a.region).await?
    } else {
        let plan = make_plan(&ctx.reg, &a.region, a.max_wave, a.capacity, fallbacks(&a.fallback)?).await?;
        if a.dry_run {
            println!("{}", plan.to_markdown());
            println!("(dry run: nothing changed)");
            return Ok(());
        }
        evacuate(&ctx, plan).await?
    };
    rec.flush();
    let check = super::run::report(&dir, &format!("evacuation of {}", a.region), &rec.history())?;
    print_outcome(&ev);
    if ev.succeeded() && check.is_clean() {
        Ok(())
    } else if matches!(ev.phase(), Phase::Aborted { .. }) && ev.settled() {
        // An abort that was asked for succeeded; one that happened (a failed wave, a
        // timeout) is the evacuation failing.
        if a.abort {
            println!("aborted: every shard has one owner");
            Ok(())
        } else {
            Err(format!("aborted, every shard has one owner; see {}", dir.display()))
        }
    } else {
        Err(format!("the evacuation did not complete cleanly; see {}", dir.display()))
    }
}

pub(super) fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

pub fn print_outcome(ev: &Evacuation) {
    let p = ev.progress();
    println!("phase: {}", serde_json::to_string(&p.phase).unwrap_or_default());
    for s in &p.shards {
        println!("  {}/{} {} -> {} (wave {}): {}", s.ns, s.shard, s.from_cell, s.to_cell, s.wave, serde_json::to_string(&s.state).unwrap_or_default());
    }
    for v in &p.verification {
        println!("  verification: {v}");
    }
}

/// What a driver needs.
pub struct Ctx {
    pub reg: Reg,
    pub rec: Arc<Recorder>,
    pub dir: PathBuf,
    pub timeout: Duration,
}

impl Ctx {
    fn progress_file(&self, kind: PlanKind) -> PathBuf {
        self.dir.join(match kind {
            PlanKind::Evacuate => "evacuate.json",
            PlanKind::Rollback => "rollback.json",
        })
    }

    fn pid_file(&self) -> PathBuf {
        self.dir.join("driver.pid")
    }

    fn abort_file(&self) -> PathBuf {
        self.dir.join("abort-requested")
    }

    fn save(&self, ev: &Evacuation) -> Result<(), String> {
        let f = self.progress_file(ev.progress().plan.kind);
        let tmp = f.with_extension("json.tmp");
        std::fs::write(&tmp, ev.to_json()).map_err(|e| format!("{}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, &f).map_err(|e| format!("{}: {e}", f.display()))
    }

    fn load(&self, kind: PlanKind) -> Result<Option<holdfast_drills::evacuation::Progress>, String> {
        let f = self.progress_file(kind);
        match std::fs::read_to_string(&f) {
            Ok(t) => Evacuation::progress_from_json(&t).map(Some).map_err(|e| format!("{}: {e}", f.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("{}: {e}", f.display())),
        }
    }
}

fn finished(ev: &Evacuation) -> bool {
    match ev.phase() {
        Phase::Done => true,
        Phase::Aborted { .. } => ev.settled(),
        _ => false,
    }
}

/// How long the planner watches each shard's token sequence to measure its acquire
/// rate (every grant takes the next token).
const RATE_WINDOW: Duration = Duration::from_secs(1);

/// What the planner weighs of one shard, as its cell reports it.
#[derive(Debug, Clone, Copy, Default)]
struct ShardUse {
    keys: u64,
    sessions: u64,
    acquires_per_s: u64,
}

/// Each healthy cell's shards: keys and sessions now, and grants per second over
/// [`RATE_WINDOW`] (the rise of the shard's token sequence at an unchanged epoch).
async fn shard_use(cells: &[(rpb::Cell, bool)]) -> BTreeMap<(String, String, String), ShardUse> {
    let sample = || async {
        let mut seen = BTreeMap::new();
        for (c, healthy) in cells {
            if !*healthy {
                continue;
            }
            for s in cell_status(c).await.map(|st| st.shards).unwrap_or_default() {
                seen.insert((c.cell.clone(), s.ns.clone(), s.shard.clone()), s);
            }
        }
        seen
    };
    let first = sample().await;
    tokio::time::sleep(RATE_WINDOW).await;
    let second = sample().await;
    second
        .into_iter()
        .map(|(k, s)| {
            let grants = first.get(&k).filter(|f| f.epoch == s.epoch).map_or(0, |f| s.seq.saturating_sub(f.seq));
            let per_s = (grants as f64 / RATE_WINDOW.as_secs_f64()).ceil() as u64;
            (k, ShardUse { keys: u64::from(s.keys), sessions: u64::from(s.sessions), acquires_per_s: per_s })
        })
        .collect()
}

/// `NS=REGION` pairs, checked.
pub(super) fn fallbacks(pairs: &[String]) -> Result<BTreeMap<NamespaceName, RegionId>, String> {
    pairs
        .iter()
        .map(|p| {
            let (ns, region) = p.split_once('=').ok_or_else(|| format!("--fallback {p:?}: expected NS=REGION"))?;
            Ok((id(NamespaceName::new(ns))?, id(RegionId::new(region))?))
        })
        .collect()
}

/// The registry's shards, cells (with health and load) and regions, planned.
pub async fn make_plan(reg: &Reg, region: &str, max_wave: usize, capacity: u64, fallback: BTreeMap<NamespaceName, RegionId>) -> Result<Plan, String> {
    let shards = reg.list_shards().await.map_err(failed)?.shards;
    let cells = reg.list_cells().await.map_err(failed)?;
    let regions = reg.call(rpb::ListRegionsRequest {}, |mut c, r| async move { c.list_regions(r).await }).await.map_err(failed)?.regions;
    let mut judged = Vec::new();
    for c in cells {
        let h = healthy(&c).await;
        judged.push((c, h));
    }
    let used = shard_use(&judged).await;
    let mut infos = Vec::new();
    for (c, healthy) in &judged {
        infos.push(CellInfo { cell: id(CellId::new(c.cell.as_str()))?, region: id(RegionId::new(c.region.as_str()))?, healthy: *healthy, capacity });
    }
    let req = PlanRequest {
        shards: shards
            .iter()
            .map(|o| {
                let u = used.get(&(o.cell.clone(), o.ns.clone(), o.shard.clone())).copied().unwrap_or_default();
                Ok(ShardPlacement {
                    ns: id(NamespaceName::new(o.ns.as_str()))?,
                    shard: id(ShardName::new(o.shard.as_str()))?,
                    region: id(RegionId::new(o.region.as_str()))?,
                    cell: id(CellId::new(o.cell.as_str()))?,
                    epoch: Epoch(o.epoch),
                    keys: u.keys,
                    sessions: u.sessions,
                    acquires_per_s: u.acquires_per_s,
                })
            })
            .collect::<Result<_, String>>()?,
        cells: infos,
        regions: regions
            .iter()
            .map(|r| {
                let state = match rpb::RegionState::try_from(r.state) {
                    Ok(rpb::RegionState::Draining) => RegionState::Draining,
                    Ok(rpb::RegionState::Evacuated) => RegionState::Evacuated,
                    _ => RegionState::Active,
                };
                Ok(RegionInfo { region: id(RegionId::new(r.region.as_str()))?, state })
            })
            .collect::<Result<_, String>>()?,
        evacuate: id(RegionId::new(region))?,
        max_wave,
        fallback,
    };
    plan::plan(&req).map_err(|e| e.to_string())
}

fn id<T>(r: Result<T, holdfast_core::NameError>) -> Result<T, String> {
    r.map_err(|e| e.to_string())
}

fn failed(s: tonic::Status) -> String {
    holdfast_rpc::status::one_line(&s)
}

/// A cell is healthy when a majority of its members answer and agree on a leader.
async fn healthy(c: &rpb::Cell) -> bool {
    let mut leaders = BTreeMap::new();
    for m in &c.members {
        let Ok(ch) = channel(&m.raft_addr).await else { continue };
        let Ok(Ok(r)) = tokio::time::timeout(Duration::from_secs(1), RaftAdminClient::new(ch).metrics(raftpb::MetricsRequest {})).await else { continue };
        let r = r.into_inner();
        if r.has_leader {
            *leaders.entry(r.leader_id).or_insert(0usize) += 1;
        }
    }
    leaders.values().any(|n| *n * 2 > c.members.len())
}

async fn cell_status(c: &rpb::Cell) -> Option<apb::CellStatusResponse> {
    for m in &c.members {
        let Ok(ch) = channel(&m.client_addr).await else { continue };
        if let Ok(Ok(r)) = tokio::time::timeout(Duration::from_secs(1), CellAdminClient::new(ch).status(apb::CellStatusRequest {})).await {
            return Some(r.into_inner());
        }
    }
    None
}

async fn set_region(reg: &Reg, region: &str, state: rpb::RegionState) -> Result<(), String> {
    let req = rpb::SetRegionStateRequest { region: region.to_owned(), state: state as i32 };
    reg.call(req, |mut c, r| async move { c.set_region_state(r).await }).await.map(|_| ()).map_err(failed)
}

/// Starts (or resumes) an evacuation with `plan`.
pub async fn evacuate(ctx: &Ctx, plan: Plan) -> Result<Evacuation, String> {
    let (ev, queue) = match ctx.load(PlanKind::Evacuate)? {
        Some(p) if p.plan.region == plan.region && !finished(&Evacuation::resume(p.clone()).0) => {
            println!("resuming the interrupted evacuation of {} from {}", p.plan.region, ctx.progress_file(PlanKind::Evacuate).display());
            let (ev, actions) = Evacuation::resume(p);
            (ev, VecDeque::from(actions))
        }
        _ => {
            println!("{}", plan.to_markdown());
            std::fs::write(ctx.dir.join("plan.json"), plan.to_json()).map_err(|e| e.to_string())?;
            std::fs::write(ctx.dir.join("plan.md"), plan.to_markdown()).map_err(|e| e.to_string())?;
            // A new evacuation: an abort request left over from an earlier one is stale.
            // (A resumed one honours it: the operator asked for it.)
            let _ = std::fs::remove_file(ctx.abort_file());
            let mut ev = Evacuation::new(plan);
            ctx.save(&ev)?;
            let queue = VecDeque::from(ev.step(Input::Start));
            (ev, queue)
        }
    };
    let region = ev.progress().plan.region.to_string();
    set_region(&ctx.reg, &region, rpb::RegionState::Draining).await?;
    let ev = drive(ctx, ev, queue).await?;
    let state = if ev.succeeded() { rpb::RegionState::Evacuated } else { rpb::RegionState::Active };
    set_region(&ctx.reg, &region, state).await?;
    Ok(ev)
}

/// `--abort`: asks a running driver to stop, or (none running) resumes the saved
/// progress and aborts it.
pub async fn abort(ctx: &Ctx) -> Result<Evacuation, String> {
    let Some(p) = ctx.load(PlanKind::Evacuate)? else { return Err(format!("no evacuation in {}", ctx.dir.display())) };
    if let Some(pid) = running_driver(ctx) {
        println!("asking the running evacuation (pid {pid}) to abort");
        std::fs::write(ctx.abort_file(), b"abort").map_err(|e| e.to_string())?;
        let deadline = tokio::time::Instant::now() + ctx.timeout;
        while running_driver(ctx).is_some() {
            if tokio::time::Instant::now() > deadline {
                return Err(format!("the evacuation (pid {pid}) did not stop within {:?}", ctx.timeout));
            }
            tokio::time::sleep(POLL).await;
        }
        let p = ctx.load(PlanKind::Evacuate)?.ok_or("the progress file disappeared")?;
        return Ok(Evacuation::resume(p).0);
    }
    let region = p.plan.region.to_string();
    let (mut ev, actions) = Evacuation::resume(p);
    let mut queue = VecDeque::from(actions);
    queue.extend(ev.step(Input::Abort { reason: "aborted by the operator".into() }));
    let ev = drive(ctx, ev, queue).await?;
    set_region(&ctx.reg, &region, rpb::RegionState::Active).await?;
    Ok(ev)
}

/// `--rollback`: every shard of the last evacuation's plan that is not at its home
/// cell goes back, in waves, from where it is now.
pub async fn rollback(ctx: &Ctx, region: &str) -> Result<Evacuation, String> {
    let Some(p) = ctx.load(PlanKind::Evacuate)? else { return Err(format!("no evacuation to roll back in {}", ctx.dir.display())) };
    if !finished(&Evacuation::resume(p.clone()).0) {
        return Err("the evacuation is still in flight: abort it first (--abort)".into());
    }
    if p.plan.region.as_str() != region {
        return Err(format!("the last evacuation in {} was of {}, not {region}", ctx.dir.display(), p.plan.region));
    }
    let owners = owners(&ctx.reg).await?;
    let mut plan = p.plan.rollback();
    let mut moves: Vec<_> = plan.waves.drain(..).flat_map(|w| w.moves).collect();
    moves.retain_mut(|m| match owners.iter().find(|o| o.ns == m.ns && o.shard == m.shard) {
        Some(o) if o.cell != m.to_cell => {
            m.from_cell = o.cell.clone();
            m.from_region = o.region.clone();
            m.epoch = o.epoch;
            true
        }
        _ => false,
    });
    if moves.is_empty() {
        return Err(format!("nothing to roll back: every shard of the plan is home in {region}"));
    }
    plan.waves = moves.chunks(plan.max_wave.max(1)).enumerate().map(|(index, c)| plan::Wave { index, moves: c.to_vec() }).collect();
    set_region(&ctx.reg, region, rpb::RegionState::Active).await?;
    println!("{}", plan.to_markdown());
    let resume = ctx.load(PlanKind::Rollback)?.filter(|p| !finished(&Evacuation::resume(p.clone()).0));
    let (ev, queue) = match resume {
        Some(p) => {
            let (ev, a) = Evacuation::resume(p);
            (ev, VecDeque::from(a))
        }
        None => {
            let _ = std::fs::remove_file(ctx.abort_file());
            let mut ev = Evacuation::new(plan);
            ctx.save(&ev)?;
            let q = VecDeque::from(ev.step(Input::Start));
            (ev, q)
        }
    };
    drive(ctx, ev, queue).await
}

fn running_driver(ctx: &Ctx) -> Option<u32> {
    let pid: u32 = std::fs::read_to_string(ctx.pid_file()).ok()?.trim().parse().ok()?;
    // Signal 0: is it alive? (A reused pid would only delay an abort; the progress
    // file is the truth either way.)
    let alive = std::process::Command::new("kill").args(["-0", &pid.to_string()]).stderr(std::process::Stdio::null()).status().is_ok_and(|s| s.success());
    (alive && pid != std::process::id()).then_some(pid)
}

/// Every shard's owner, as the state machine sees owners.
async fn owners(reg: &Reg) -> Result<Vec<OwnerView>, String> {
    let list = reg.list_shards().await.map_err(failed)?;
    list.shards.iter().map(view).collect()
}

fn view(o: &rpb::ShardOwner) -> Result<OwnerView, String> {
    let moving = o.state == rpb::ShardState::Moving as i32 && !o.to_cell.is_empty();
    Ok(OwnerView {
        ns: id(NamespaceName::new(o.ns.as_str()))?,
        shard: id(ShardName::new(o.shard.as_str()))?,
        region: id(RegionId::new(o.region.as_str()))?,
        cell: id(CellId::new(o.cell.as_str()))?,
        epoch: Epoch(o.epoch),
        moving_to: if moving { Some(id(CellId::new(o.to_cell.as_str()))?) } else { None },
    })
}

async fn get_owner(reg: &Reg, ns: &NamespaceName, shard: &ShardName) -> Option<OwnerView> {
    reg.owner(ns.as_str(), shard.as_str()).await.and_then(|o| view(&o).ok())
}

/// Removes the pid file when the driver ends, however it ends.
struct PidFile(PathBuf);

impl Drop for PidFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Runs the state machine to the end: performs actions, feeds observations, polls
/// shards in flight, honours an abort request, saves after every step.
pub async fn drive(ctx: &Ctx, ev: Evacuation, queue: VecDeque<Action>) -> Result<Evacuation, String> {
    let span = tracing::info_span!("drill.evacuate", waves = ev.progress().plan.waves.len());
    drive_steps(ctx, ev, queue).instrument(span).await
}

async fn drive_steps(ctx: &Ctx, mut ev: Evacuation, mut queue: VecDeque<Action>) -> Result<Evacuation, String> {
    std::fs::write(ctx.pid_file(), std::process::id().to_string()).map_err(|e| e.to_string())?;
    let _pid = PidFile(ctx.pid_file());
    let deadline = tokio::time::Instant::now() + ctx.timeout;
    let mut last = (ev.phase().clone(), ev.progress().gate_passed);
    loop {
        while let Some(a) = queue.pop_front() {
            for input in perform(ctx, &ev, a).await {
                queue.extend(ev.step(input));
                last = waves(ctx, &ev, last);
                ctx.save(&ev)?;
            }
        }
        if finished(&ev) {
            return Ok(ev);
        }
        let timed_out = tokio::time::Instant::now() > deadline;
        if ctx.abort_file().exists() || timed_out {
            let _ = std::fs::remove_file(ctx.abort_file());
            if matches!(ev.phase(), Phase::Aborted { .. }) && timed_out {
                return Err("the abort did not settle before the deadline: some shard is still moving; rerun with --abort".into());
            }
            let reason = if timed_out { "timed out" } else { "aborted by the operator" };
            queue.extend(ev.step(Input::Abort { reason: reason.into() }));
            last = waves(ctx, &ev, last);
            ctx.save(&ev)?;
            continue;
        }
        let in_flight: Vec<_> =
            ev.progress().shards.iter().filter(|s| matches!(s.state, ShardState::Moving { .. })).map(|s| (s.ns.clone(), s.shard.clone())).collect();
        for (ns, shard) in in_flight {
            if let Some(v) = get_owner(&ctx.reg, &ns, &shard).await {
                queue.extend(ev.step(Input::Owner(v)));
                last = waves(ctx, &ev, last);
                ctx.save(&ev)?;
            }
        }
        if queue.is_empty() {
            tokio::time::sleep(POLL).await;
        }
    }
}

/// Records a wave's start (its gate passed) and end (the phase left it).
fn waves(ctx: &Ctx, ev: &Evacuation, (phase, gate): (Phase, bool)) -> (Phase, bool) {
    let now = (ev.phase().clone(), ev.progress().gate_passed);
    if let Phase::Executing { wave } = phase {
        if gate && now.0 != phase {
            ctx.rec.record(EventKind::WaveEnded { wave: wave as u32 });
        }
    }
    if let Phase::Executing { wave } = now.0 {
        if now.1 && !(gate && phase == now.0) {
            ctx.rec.record(EventKind::WaveStarted { wave: wave as u32 });
        }
    }
    now
}

/// One action, in a `drill.step` span (its kind and the wave under way): with traces
/// exported, an evacuation is one trace of its steps and the registry calls they make.
async fn perform(ctx: &Ctx, ev: &Evacuation, action: Action) -> Vec<Input> {
    let wave = match ev.phase() {
        Phase::Executing { wave } => *wave as i64,
        _ => -1,
    };
    let kind = match &action {
        Action::WaitHealthy { .. } => "wait_healthy",
        Action::MoveShard { .. } => "move_shard",
        Action::AbortMove { .. } => "abort_move",
        Action::ObserveOwners { .. } => "observe_owners",
        Action::Verify => "verify",
    };
    perform_action(ctx, ev, action).instrument(tracing::info_span!("drill.step", action = kind, wave)).await
}

async fn perform_action(ctx: &Ctx, ev: &Evacuation, action: Action) -> Vec<Input> {
    match action {
        Action::WaitHealthy { wave } => {
            let targets: Vec<String> = ev.progress().shards.iter().filter(|s| s.wave == wave).map(|s| s.to_cell.to_string()).collect();
            let deadline = tokio::time::Instant::now() + HEALTH_GATE;
            loop {
                let cells = ctx.reg.list_cells().await.unwrap_or_default();
                let mut sick = Vec::new();
                for t in &targets {
                    match cells.iter().find(|c| &c.cell == t) {
                        Some(c) if healthy(c).await => {}
                        _ => sick.push(t.clone()),
                    }
                }
                if sick.is_empty() {
                    return vec![Input::Healthy { healthy: true }];
                }
                if tokio::time::Instant::now() > deadline {
                    sick.sort();
                    sick.dedup();
                    return vec![Input::Abort { reason: format!("wave {wave}: targets not healthy for {HEALTH_GATE:?}: {}", sick.join(", ")) }];
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
        Action::MoveShard { ns, shard, to_cell } => {
            let req = rpb::MoveShardRequest { ns: ns.to_string(), shard: shard.to_string(), to_cell: to_cell.to_string(), planned: true, ..Default::default() };
            match ctx.reg.move_shard(req).await {
                Ok(r) => r.owner.as_ref().and_then(|o| view(o).ok()).map(Input::Owner).into_iter().collect(),
                // In progress, or unknown: observe the owner instead.
                Err(s) if matches!(code_of(&s), None | Some(ErrorCode::Moving | ErrorCode::Unavailable | ErrorCode::NotLeader)) => {
                    get_owner(&ctx.reg, &ns, &shard).await.map(Input::Owner).into_iter().collect()
                }
                Err(s) => vec![Input::MoveRefused { ns, shard, reason: failed(s) }],
            }
        }
        Action::AbortMove { ns, shard, epoch } => {
            let req = rpb::AbortMoveRequest { ns: ns.to_string(), shard: shard.to_string(), epoch: epoch.0 };
            // A repeated abort, or one that lost the race with the move's end, is
            // refused harmlessly: the owner we read next is what counts.
            let _ = ctx.reg.call(req, |mut c, r| async move { c.abort_move(r).await }).await;
            get_owner(&ctx.reg, &ns, &shard).await.map(Input::Owner).into_iter().collect()
        }
        Action::ObserveOwners { shards } => {
            let mut out = Vec::new();
            for (ns, shard) in shards {
                if let Some(v) = get_owner(&ctx.reg, &ns, &shard).await {
                    out.push(Input::Owner(v));
                }
            }
            out
        }
        Action::Verify => {
            let mut problems = match owners(&ctx.reg).await {
                Ok(o) => verify_owners(&ev.progress().plan, &o),
                Err(e) => vec![format!("cannot list owners: {e}")],
            };
            let check = holdfast_drills::checker::check(&ctx.rec.history());
            problems.extend(check.violations.iter().map(|v| format!("safety: {}", v.summary)));
            vec![Input::Verified { problems }]
        }
    }
}
