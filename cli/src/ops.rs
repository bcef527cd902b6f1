//! Operator and user commands against a deployment: `--endpoints` (or
//! `HOLDFAST_ENDPOINTS`) names gateways of any region — or, for the commands that
//! form a deployment before its gateways can serve, the registry's voters — default
//! the playground's east gateway 127.0.0.1:7000; `-o table|json`. JSON is for scripts
//! (one document per command); tables for people.

use crate::client::{locks, registry};
use crate::remote::{self, ClientTls, Remote};
use clap::{Args, Subcommand, ValueEnum};
use holdfast_proto::json::{session_hex, BrokenView, SessionInfoView};
use holdfast_proto::lock::v1 as pb;
use holdfast_proto::raft::v1 as raftpb;
use holdfast_proto::registry::v1 as rpb;
use holdfast_rpc::CallContext;
use serde::Serialize;
use serde_json::{json, Value};

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Output {
    Table,
    Json,
}

/// Where to send the command and how to print the answer.
#[derive(Debug, Args, Clone)]
pub struct Gw {
    /// Gateways' gRPC addresses (or the registry voters' client addresses),
    /// comma-separated: DNS names or IPs; one that does not answer is skipped, a
    /// NOT_LEADER hint is followed.
    #[arg(long = "endpoints", visible_alias = "endpoint", env = "HOLDFAST_ENDPOINTS", default_value = "127.0.0.1:7000")]
    pub endpoints: String,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    pub output: Output,
    #[command(flatten)]
    pub tls: ClientTls,
}

impl Gw {
    pub fn remote(&self) -> Result<Remote, String> {
        Remote::new(&self.endpoints, &self.tls)
    }
}

#[derive(Debug, Subcommand)]
pub enum RegionCmd {
    /// Every region and its state (active, draining, evacuated).
    ///
    /// Example: holdfast region list -o json
    List {
        #[command(flatten)]
        gw: Gw,
    },
    /// Record a new region, active: cells may be registered and shards placed there.
    /// A region that exists already is left as it is.
    ///
    /// Example: holdfast region add --region north
    Add {
        #[command(flatten)]
        gw: Gw,
        #[arg(long)]
        region: String,
    },
    /// Place nothing new in a region (no placement, no move into it); what it owns
    /// stays. `holdfast drill evacuate` drains the region it empties by itself.
    ///
    /// Example: holdfast region drain --region east
    Drain {
        #[command(flatten)]
        gw: Gw,
        #[arg(long)]
        region: String,
    },
    /// Take placements and moves into a region again (after a drain, or before an
    /// evacuation's rollback).
    ///
    /// Example: holdfast region activate --region east
    Activate {
        #[command(flatten)]
        gw: Gw,
        #[arg(long)]
        region: String,
    },
    /// A lost region's shards, every one, moved to the surviving regions' cells as
    /// unplanned moves in waves (load spread by the evacuation planner). They complete
    /// once each source's ownership lease has run out, or at once with
    /// --fence-confirmed (you confirmed the region serves no client; audited with
    /// --reason). Its state is the registry's: run it again from any machine to resume,
    /// --abort to stop. Runbook: docs/runbooks/region-lost.md.
    ///
    /// Example: holdfast region failover south --fence-confirmed --reason "south powered off, INC-4711"
    Failover(crate::drill::failover::FailoverArgs),
}

/// `holdfast cell register`: a cell and its members, as the registry records them.
#[derive(Debug, Args)]
pub struct RegisterCellArgs {
    #[command(flatten)]
    gw: Gw,
    #[arg(long)]
    cell: String,
    #[arg(long)]
    region: String,
    /// ID=RAFT_ADDR,CLIENT_ADDR, once per voter (the whole membership).
    #[arg(long = "member", required = true)]
    members: Vec<String>,
}

/// `holdfast cell retire`.
#[derive(Debug, Args)]
pub struct RetireCellArgs {
    #[command(flatten)]
    gw: Gw,
    #[arg(long)]
    cell: String,
}

pub async fn retire_cell(a: RetireCellArgs) -> Result<(), String> {
    let req = rpb::RetireCellRequest { cell: a.cell.clone() };
    // Not retried blindly: a retirement whose answer was lost is refused the second
    // time as an unknown cell, which says what happened.
    let r = a.gw.remote()?.once(|ch| registry(ch, req.clone(), |mut c, r| async move { c.retire_cell(r).await })).await?;
    let cell = r.cell.unwrap_or_default();
    eprintln!("cell {} retired from the registry; stop its nodes", cell.cell);
    emit(a.gw.output, &json!({ "cell": cell.cell, "region": cell.region, "retired": true }));
    Ok(())
}

pub async fn register_cell(a: RegisterCellArgs) -> Result<(), String> {
    let members = a
        .members
        .iter()
        .map(|m| crate::serve::parse_member(m).map(|m| rpb::CellMember { node_id: m.node_id, raft_addr: m.raft_addr, client_addr: m.client_addr }))
        .collect::<Result<Vec<_>, _>>()?;
    record_cell(&a.gw, a.cell, a.region, members).await
}

/// Records `cell` with `members` in the registry (`cell register`, and after a member
/// change) and prints the record.
pub async fn record_cell(gw: &Gw, cell: String, region: String, members: Vec<rpb::CellMember>) -> Result<(), String> {
    let req = rpb::RegisterCellRequest { cell, region, members };
    // Recording a cell is an upsert of the same record: safe to send again.
    let r = gw.remote()?.call(|ch| registry(ch, req.clone(), |mut c, r| async move { c.register_cell(r).await })).await?;
    let cell = r.cell.unwrap_or_default();
    let members: Vec<Value> = cell.members.iter().map(|m| json!({ "node_id": m.node_id, "raft": m.raft_addr, "client": m.client_addr })).collect();
    emit(gw.output, &json!({ "cell": cell.cell, "region": cell.region, "members": members }));
    Ok(())
}
#[derive(Debug, Args, Clone)]
pub struct ShardSel {
    #[arg(long)]
    ns: String,
    #[arg(long, default_value = "default")]
    shard: String,
}

impl ShardSel {
    fn shard_ref(&self) -> Option<pb::ShardRef> {
        Some(pb::ShardRef::named(self.ns.clone(), self.shard.clone()))
    }
}

#[derive(Debug, Subcommand)]
pub enum SessionCmd {
    /// Sessions of a shard.
    ///
    /// Example: holdfast session list --ns demo
    List {
        #[command(flatten)]
        gw: Gw,
        #[command(flatten)]
        at: ShardSel,
    },
    /// Close a session: its locks are released.
    ///
    /// Example: holdfast session close --ns demo 0x7ae9bca7d0d6fbc4
    Close {
        #[command(flatten)]
        gw: Gw,
        #[command(flatten)]
        at: ShardSel,
        /// The session id, decimal or 0x-hex.
        id: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum AdminCmd {
    /// Break a lock: every hold ends, the token floor rises, the break is audited.
    ///
    /// Example: holdfast admin break-lock --ns demo job-1 --reason "holder wedged, INC-4211"
    BreakLock {
        #[command(flatten)]
        gw: Gw,
        #[command(flatten)]
        at: ShardSel,
        name: String,
        /// Why (required): it goes to the audit record.
        #[arg(long)]
        reason: String,
        /// Who, for the audit record (default: $USER).
        #[arg(long, env = "USER", default_value = "unknown")]
        by: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum ClusterCmd {
    /// Every registry voter and every cell node: state, leader, term, commit index,
    /// reachable or not.
    ///
    /// Cell nodes come from the registry (through the gateway). The registry's own voters
    /// are not listed by any gateway API: give one voter's Raft address with
    /// `--registry-raft` (the playground's: `jq -r .regions.east.registry.raft
    /// endpoints.json`) and the others are found in its Raft membership.
    ///
    /// Example: holdfast cluster status --registry-raft 127.0.0.1:7003
    Status {
        #[command(flatten)]
        gw: Gw,
        /// Raft addresses of registry voters (comma-separated; one that answers is
        /// enough). Without it only cell nodes are listed.
        #[arg(long, env = "HOLDFAST_REGISTRY_RAFT", value_delimiter = ',')]
        registry_raft: Vec<String>,
    },
}

/// Prints the answer as JSON (the typed shapes of `holdfast_proto::json`, the same the
/// HTTP API answers), or as a table: an array of objects becomes rows under the keys of
/// its first object (scalar columns only: `-o json` has the rest); an object becomes
/// `key  value` lines. A closed stdout (`holdfast shard list | head`) is not an error
/// worth a panic: the reader has what it wanted.
pub fn emit(output: Output, answer: &impl Serialize) {
    use std::io::Write as _;
    let v = serde_json::to_value(answer).expect("answers serialize");
    let text = match output {
        Output::Json => format!("{}\n", serde_json::to_string_pretty(&v).expect("json")),
        Output::Table => table(&v),
    };
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

fn region_row(g: &rpb::Region) -> Value {
    let state = rpb::RegionState::try_from(g.state).map_or("unknown".to_owned(), |s| s.as_str_name().trim_start_matches("REGION_STATE_").to_lowercase());
    json!({ "region": g.region, "state": state })
}

fn cell(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        Value::Array(a) if a.iter().all(|x| !x.is_object() && !x.is_array()) => a.iter().map(cell).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

fn table(v: &Value) -> String {
    match v {
        Value::Array(rows) if rows.is_empty() => "(none)\n".into(),
        Value::Array(rows) => {
            let scalar = |v: &Value| !matches!(v, Value::Object(_)) && !v.as_array().is_some_and(|a| a.iter().any(|x| x.is_object()));
            let keys: Vec<String> = rows[0].as_object().map(|o| o.iter().filter(|(_, v)| scalar(v)).map(|(k, _)| k.clone()).collect()).unwrap_or_default();
            let cells: Vec<Vec<String>> = rows.iter().map(|r| keys.iter().map(|k| cell(&r[k])).collect()).collect();
            let widths: Vec<usize> = keys.iter().enumerate().map(|(i, k)| cells.iter().map(|r| r[i].len()).chain([k.len()]).max().unwrap_or(0)).collect();
            let line =
                |vals: Vec<String>| vals.iter().zip(&widths).map(|(s, w)| format!("{s:<w$}")).collect::<Vec<_>>().join("  ").trim_end().to_owned() + "\n";
            let mut out = line(keys.iter().map(|k| k.to_uppercase()).collect());
            for r in cells {
                out += &line(r);
            }
            out
        }
        Value::Object(o) => {
            let w = o.keys().map(String::len).max().unwrap_or(0);
            o.iter().map(|(k, v)| format!("{k:<w$}  {}\n", cell(v))).collect()
        }
        other => format!("{}\n", cell(other)),
    }
}

pub async fn region(cmd: RegionCmd) -> Result<(), String> {
    let set = |gw: Gw, region: String, state: rpb::RegionState| async move {
        let req = rpb::SetRegionStateRequest { region, state: state as i32 };
        let r = gw.remote()?.call(|ch| registry(ch, req.clone(), |mut c, r| async move { c.set_region_state(r).await })).await?;
        emit(gw.output, &r.region.as_ref().map(region_row));
        Ok(())
    };
    match cmd {
        RegionCmd::List { gw } => {
            let r = gw.remote()?.call(|ch| registry(ch, rpb::ListRegionsRequest {}, |mut c, r| async move { c.list_regions(r).await })).await?;
            emit(gw.output, &r.regions.iter().map(region_row).collect::<Vec<_>>());
            Ok(())
        }
        RegionCmd::Add { gw, region } => {
            let remote = gw.remote()?;
            let req = rpb::CreateRegionRequest { region: region.clone() };
            match remote.call_status(|ch| registry(ch, req.clone(), |mut c, r| async move { c.create_region(r).await })).await {
                Ok(r) => emit(gw.output, &r.region.as_ref().map(region_row)),
                Err(s) if holdfast_rpc::status::code_of(&s) == Some(holdfast_core::ErrorCode::AlreadyExists) => {
                    let r = remote.call(|ch| registry(ch, rpb::ListRegionsRequest {}, |mut c, r| async move { c.list_regions(r).await })).await?;
                    eprintln!("region {region} exists already: nothing to do");
                    emit(gw.output, &r.regions.iter().find(|g| g.region == region).map(region_row));
                }
                Err(s) => return Err(s.message().to_owned()),
            }
            Ok(())
        }
        RegionCmd::Drain { gw, region } => set(gw, region, rpb::RegionState::Draining).await,
        RegionCmd::Activate { gw, region } => set(gw, region, rpb::RegionState::Active).await,
        RegionCmd::Failover(a) => crate::drill::failover::run(a).await,
    }
}

fn session_id(s: &str) -> Result<u64, String> {
    let parsed = match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    };
    parsed.map_err(|_| format!("session id {s:?} is not a decimal or 0x-hex number"))
}

pub async fn session(cmd: SessionCmd) -> Result<(), String> {
    match cmd {
        SessionCmd::List { gw, at } => {
            let req = pb::ListSessionsRequest { shard: at.shard_ref() };
            let r = gw.remote()?.call(|ch| locks(ch, req.clone(), |mut c, r| async move { c.list_sessions(r).await })).await?;
            emit(gw.output, &r.sessions.iter().map(|s| SessionInfoView::from_pb(s, session_hex)).collect::<Vec<_>>());
        }
        SessionCmd::Close { gw, at, id } => {
            let req = pb::CloseSessionRequest { session_id: session_id(&id)?, shard: at.shard_ref() };
            gw.remote()?.call(|ch| locks(ch, req.clone(), |mut c, r| async move { c.close_session(r).await })).await?;
            emit(gw.output, &json!({ "closed": session_hex(req.session_id) }));
        }
    }
    Ok(())
}

pub async fn admin(cmd: AdminCmd) -> Result<(), String> {
    let AdminCmd::BreakLock { gw, at, name, reason, by } = cmd;
    if reason.trim().is_empty() {
        return Err("--reason must say why: it goes to the audit record".into());
    }
    let req = pb::BreakLockRequest { shard: at.shard_ref(), name: name.clone(), reason };
    let ctx = CallContext::default().acting_for(by.clone());
    // Not retried blindly: a second break would raise the floor again.
    let r = gw.remote()?.once(|ch| locks(ch, ctx.request(req.clone()), |mut c, r| async move { c.break_lock(r).await })).await?;
    emit(gw.output, &BrokenView { lock: name, new_floor: r.new_floor.to_string(), by });
    Ok(())
}

/// One row of `cluster status`; `region` is unknown (null) for registry voters: their
/// Raft membership does not say; `node` is null for a `--registry-raft` address that
/// did not answer.
fn node_row(group: &str, cell: Option<&str>, region: Option<&str>, node: Option<u64>, raft: &str, m: &Result<raftpb::MetricsResponse, String>) -> Value {
    let head = json!({ "group": group, "cell": cell, "region": region, "node": node, "raft": raft });
    let tail = match m {
        Ok(x) => json!({
            "state": x.server_state.to_lowercase(),
            "leader": if x.has_leader { Value::from(x.leader_id) } else { Value::Null },
            "term": x.current_term, "commit": if x.has_committed { Value::from(x.commit_index) } else { Value::Null },
            "health": "ok",
        }),
        Err(e) => json!({ "state": "-", "leader": Value::Null, "term": Value::Null, "commit": Value::Null, "health": format!("unreachable: {e}") }),
    };
    let mut row = head.as_object().cloned().unwrap_or_default();
    row.extend(tail.as_object().cloned().unwrap_or_default());
    Value::Object(row)
}

/// The registry's voters and learners, from the Raft membership of the first of
/// `seeds` that answers; a row per node. If none answers, a row per seed says so.
async fn registry_rows(t: &holdfast_rpc::Transport, seeds: &[String]) -> Vec<Value> {
    let mut failures = Vec::new();
    for seed in seeds {
        let first = match remote::raft_metrics(t, seed).await {
            Ok(m) => m,
            Err(e) => {
                failures.push(node_row("registry", None, None, None, seed, &Err(e)));
                continue;
            }
        };
        let nodes = first.membership.as_ref().map(|ms| ms.nodes.clone()).unwrap_or_default();
        let mut ids: Vec<u64> = nodes.keys().copied().collect();
        ids.sort_unstable();
        let mut rows = Vec::new();
        for id in ids {
            let raft = &nodes[&id].raft_addr;
            let metrics = if id == first.node_id { Ok(first.clone()) } else { remote::raft_metrics(t, raft).await };
            rows.push(node_row("registry", None, None, Some(id), raft, &metrics));
        }
        return rows;
    }
    failures
}

pub async fn cluster(cmd: ClusterCmd) -> Result<(), String> {
    let ClusterCmd::Status { gw, registry_raft } = cmd;
    let seeds: Vec<String> = registry_raft.iter().map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect();
    let cells = gw.remote()?.call(|ch| registry(ch, rpb::ListCellsRequest::default(), |mut c, r| async move { c.list_cells(r).await })).await?.cells;
    let remote = gw.remote()?;
    let mut rows = registry_rows(remote.transport(), &seeds).await;
    for c in &cells {
        for m in &c.members {
            let metrics = remote::raft_metrics(remote.transport(), &m.raft_addr).await;
            rows.push(node_row("cell", Some(&c.cell), Some(&c.region), Some(m.node_id), &m.raft_addr, &metrics));
        }
    }
    emit(gw.output, &rows);
    if seeds.is_empty() && matches!(gw.output, Output::Table) {
        eprintln!("(registry voters not shown: pass --registry-raft <a voter's Raft address>)");
    }
    Ok(())
}
