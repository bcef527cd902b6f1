//! Lock, namespace and shard commands. Lock commands speak LockService, which a
//! gateway and a cell both serve; `ns create|get|list` and `shard owner|move|list` ask
//! the registry through a gateway; `ns apply` and `shard adopt|seal|served` are the
//! admin-mode calls to one cell (`CellAdmin`), for a cell run without a registry.

use crate::ops::{self, emit, Gw, Output};
use clap::{Args, Subcommand, ValueEnum};
use holdfast_proto::admin::v1 as apb;
use holdfast_proto::admin::v1::cell_admin_client::CellAdminClient;
use holdfast_proto::lock::v1 as pb;
use holdfast_proto::lock::v1::lock_service_client::LockServiceClient;
use holdfast_proto::registry::v1 as rpb;
use std::future::Future;
use std::time::Duration;
use tonic::transport::Channel;

#[derive(Debug, Args, Clone)]
pub struct Target {
    /// A gateway's gRPC address, or a cell node's client address (NOT_LEADER is
    /// followed once).
    #[arg(long, env = "HOLDFAST_ENDPOINT", default_value = "127.0.0.1:7000")]
    endpoint: String,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    output: Output,
    /// Namespace.
    #[arg(long, default_value = "default")]
    ns: String,
    /// Shard of the namespace.
    #[arg(long, default_value = "default")]
    shard: String,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum IntentArg {
    Efficiency,
    Correctness,
    Leadership,
}

/// A namespace's settings, as `ns create` (registry) and `ns apply` (admin mode) take
/// them; 0 means the intent's default.
#[derive(Debug, Args, Clone)]
pub struct NsSettings {
    #[arg(long)]
    owner: String,
    #[arg(long, value_enum, default_value = "correctness")]
    intent: IntentArg,
    #[arg(long, default_value_t = 0)]
    lock_delay_ms: u64,
    #[arg(long, default_value_t = 0)]
    ttl_min_ms: u64,
    #[arg(long, default_value_t = 0)]
    ttl_max_ms: u64,
    #[arg(long, default_value_t = 0)]
    max_hold_ms: u64,
}

impl NsSettings {
    fn config(self, name: String) -> apb::NamespaceConfig {
        let intent = match self.intent {
            IntentArg::Efficiency => pb::Intent::Efficiency,
            IntentArg::Correctness => pb::Intent::Correctness,
            IntentArg::Leadership => pb::Intent::Leadership,
        } as i32;
        apb::NamespaceConfig {
            name,
            owner: self.owner,
            intent,
            ttl_min_ms: self.ttl_min_ms,
            ttl_max_ms: self.ttl_max_ms,
            max_hold_ms: self.max_hold_ms,
            lock_delay_ms: self.lock_delay_ms,
            ..Default::default()
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum NsCmd {
    /// Create a namespace in the registry (through a gateway).
    ///
    /// Example: holdfast ns create payments --owner team-pay --intent correctness --lock-delay-ms 1000
    Create {
        #[command(flatten)]
        gw: Gw,
        name: String,
        #[command(flatten)]
        settings: NsSettings,
        /// fail-closed (default) or fail-open (efficiency namespaces only).
        #[arg(long, default_value = "fail-closed")]
        posture: String,
        /// Also place its shard `default` on this cell.
        #[arg(long)]
        place_on: Option<String>,
    },
    /// One namespace's config.
    ///
    /// Example: holdfast ns get payments -o json
    Get {
        #[command(flatten)]
        gw: Gw,
        name: String,
    },
    /// Every namespace.
    ///
    /// Example: holdfast ns list
    List {
        #[command(flatten)]
        gw: Gw,
    },
    /// Admin mode: create or update a namespace on one cell run without a registry.
    ///
    /// Example: holdfast ns apply --ns payments --owner team-pay --intent correctness --version 1
    Apply {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        settings: NsSettings,
        /// Only a higher version replaces what the cell has.
        #[arg(long, default_value_t = 1)]
        version: u64,
    },
}

#[derive(Debug, Subcommand)]
pub enum ShardCmd {
    /// Admin mode: serve a shard on one cell at an epoch.
    ///
    /// Example: holdfast shard adopt --ns payments --shard default --epoch 1
    Adopt {
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        epoch: u32,
    },
    /// Admin mode: stop serving a shard on one cell; its holds end with MOVED.
    ///
    /// Example: holdfast shard seal --ns payments --epoch 1
    Seal {
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        epoch: u32,
    },
    /// Admin mode: what one cell serves.
    ///
    /// Example: holdfast shard served --endpoint 127.0.0.1:7004
    Served {
        #[command(flatten)]
        target: Target,
    },
    /// Where a shard lives: region, cell, epoch, state.
    ///
    /// Example: holdfast shard owner demo default
    Owner {
        #[command(flatten)]
        gw: Gw,
        ns: String,
        #[arg(default_value = "default")]
        shard: String,
    },
    /// Every shard (of one namespace, with --ns) and its owner.
    ///
    /// Example: holdfast shard list --ns demo -o json
    List {
        #[command(flatten)]
        gw: Gw,
        #[arg(long, default_value = "")]
        ns: String,
    },
    /// Move a shard to another cell: planned (drain, seal, epoch+1) unless --unplanned.
    ///
    /// Example: holdfast shard move demo default --to west-1
    Move {
        #[command(flatten)]
        gw: Gw,
        ns: String,
        shard: String,
        #[arg(long)]
        to: String,
        /// The source is gone: wait out its ownership lease instead of its seal.
        #[arg(long)]
        unplanned: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum LockCmd {
    /// Create a session and take a lock in it. Without keep-alives the hold ends when
    /// the session's TTL runs out (use the SDK to hold a lock for long).
    ///
    /// Example: holdfast lock acquire --ns payments settle-batch-7 --ttl-ms 10000
    Acquire {
        #[command(flatten)]
        target: Target,
        name: String,
        #[arg(long, default_value_t = 10_000)]
        ttl_ms: u64,
        /// Wait in the server's queue this long; 0 = fail with LOCK_HELD.
        #[arg(long, default_value_t = 0)]
        wait_ms: u64,
        /// The holder's payload shown by describe.
        #[arg(long, default_value = "")]
        value: String,
    },
    /// Release a hold by its token.
    ///
    /// Example: holdfast lock release --ns payments settle-batch-7 --token 1099511627777
    Release {
        #[command(flatten)]
        target: Target,
        name: String,
        #[arg(long)]
        token: u64,
    },
    /// Holders, waiters, token floor, lock-delay.
    ///
    /// Example: holdfast lock describe --ns payments settle-batch-7
    Describe {
        #[command(flatten)]
        target: Target,
        name: String,
    },
    /// Locks of a shard whose names start with a prefix, with their holders.
    ///
    /// Example: holdfast lock list --ns demo --prefix job-
    List {
        #[command(flatten)]
        target: Target,
        #[arg(long, default_value = "")]
        prefix: String,
    },
    /// Stream a lock's events (queued, acquired, ended with its reason) until Ctrl-C.
    ///
    /// Example: holdfast lock watch --ns demo leader
    Watch {
        #[command(flatten)]
        target: Target,
        name: String,
        /// Resume after this revision (0 = from now).
        #[arg(long, default_value_t = 0)]
        from_revision: u64,
    },
    /// Hold a lock while a command runs (like `consul lock`): the token is passed in
    /// HOLDFAST_TOKEN, the session is kept alive, and the command is stopped if the lease
    /// is lost. Exits with the command's status.
    ///
    /// Example: holdfast lock exec --ns demo nightly-report -- ./report.sh --full
    Exec {
        #[command(flatten)]
        target: Target,
        name: String,
        #[arg(long, default_value_t = 15_000)]
        ttl_ms: u64,
        /// Wait in the queue this long for the lock.
        #[arg(long, default_value_t = 60_000)]
        wait_ms: u64,
        #[arg(required = true, last = true)]
        command: Vec<String>,
    },
    /// Is this token a current holder's? (what a resource may ask)
    ///
    /// Example: holdfast lock check --ns payments settle-batch-7 --token 1099511627777
    Check {
        #[command(flatten)]
        target: Target,
        name: String,
        #[arg(long)]
        token: u64,
    },
}

/// Calls `f` on `endpoint`; on NOT_LEADER with a hint, once more on the hinted leader.
/// A transient refusal (`MOVING`, `UNAVAILABLE`, a leader election) is retried with
/// backoff for up to 10 s, showing progress on stderr.
async fn call<T, F, Fut>(endpoint: &str, f: F) -> Result<T, String>
where
    F: Fn(Channel) -> Fut,
    Fut: Future<Output = Result<T, tonic::Status>>,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut pause = Duration::from_millis(100);
    loop {
        let answer = match f(ops::channel(endpoint).await?).await {
            Ok(v) => return Ok(v),
            Err(s) => match s.metadata().get("holdfast-leader").and_then(|v| v.to_str().ok()).map(str::to_owned) {
                Some(leader) if code(&s) == "NOT_LEADER" => f(ops::channel(&leader).await?).await,
                _ => Err(s),
            },
        };
        match answer {
            Ok(v) => return Ok(v),
            Err(s) if ["MOVING", "UNAVAILABLE", "NOT_LEADER"].contains(&code(&s).as_str()) && std::time::Instant::now() < deadline => {
                eprintln!("{} — retrying", describe_status(s));
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
            }
            Err(s) => return Err(describe_status(s)),
        }
    }
}

fn code(s: &tonic::Status) -> String {
    s.metadata().get("holdfast-code").and_then(|v| v.to_str().ok()).unwrap_or("UNAVAILABLE").to_owned()
}

fn describe_status(s: tonic::Status) -> String {
    format!("{}: {}", code(&s), s.message())
}

fn shard_ref(t: &Target) -> Option<pb::ShardRef> {
    Some(pb::ShardRef { ns: t.ns.clone(), shard: t.shard.clone(), epoch: 0 })
}

pub async fn ns(cmd: NsCmd) -> Result<(), String> {
    let (target, settings, version) = match cmd {
        NsCmd::Apply { target, settings, version } => (target, settings, version),
        other => return ns_registry(other).await,
    };
    let config = apb::NamespaceConfig { version, ..settings.config(target.ns.clone()) };
    let r = call(&target.endpoint, |ch| {
        let config = config.clone();
        async move { CellAdminClient::new(ch).apply_namespace(apb::ApplyNamespaceRequest { config: Some(config) }).await }
    })
    .await?
    .into_inner();
    emit(target.output, &serde_json::json!({ "namespace": target.ns, "version": r.version }));
    Ok(())
}

pub async fn shard(cmd: ShardCmd) -> Result<(), String> {
    match cmd {
        ShardCmd::Adopt { target, epoch } => {
            let r = call(&target.endpoint, |ch| {
                let req = apb::AdoptShardRequest { ns: target.ns.clone(), shard: target.shard.clone(), epoch, delayed_locks: vec![] };
                async move { CellAdminClient::new(ch).adopt_shard(req).await }
            })
            .await?
            .into_inner();
            emit(target.output, &serde_json::json!({ "ns": target.ns, "shard": target.shard, "epoch": r.epoch }));
        }
        ShardCmd::Seal { target, epoch } => {
            let r = call(&target.endpoint, |ch| {
                let req = apb::SealShardRequest { ns: target.ns.clone(), shard: target.shard.clone(), epoch };
                async move { CellAdminClient::new(ch).seal_shard(req).await }
            })
            .await?
            .into_inner();
            emit(
                target.output,
                &serde_json::json!({ "ns": target.ns, "shard": target.shard, "highest_token": r.highest_token.to_string(), "held_locks": r.held_locks }),
            );
        }
        ShardCmd::Served { target } => {
            let r = call(&target.endpoint, |ch| async move { CellAdminClient::new(ch).status(apb::CellStatusRequest {}).await }).await?.into_inner();
            let shards: Vec<_> = r
                .shards
                .iter()
                .map(|s| serde_json::json!({ "ns": s.ns, "shard": s.shard, "epoch": s.epoch, "seq": s.seq, "sealed": s.sealed, "keys": s.keys }))
                .collect();
            emit(target.output, &serde_json::Value::Array(shards));
        }
        ShardCmd::Owner { gw, ns, shard } => {
            let r = ops::registry(&gw).await?.get_owner(rpb::GetOwnerRequest { ns, shard }).await.map_err(ops::failed)?.into_inner();
            emit(gw.output, &r.owner.as_ref().map(ops::owner_json).unwrap_or_default());
        }
        ShardCmd::List { gw, ns } => {
            let r = ops::registry(&gw).await?.list_shards(rpb::ListShardsRequest { ns, cell: String::new() }).await.map_err(ops::failed)?.into_inner();
            emit(gw.output, &serde_json::Value::Array(r.shards.iter().map(ops::owner_json).collect()));
        }
        ShardCmd::Move { gw, ns, shard, to, unplanned } => {
            let mut reg = ops::registry(&gw).await?;
            let req = rpb::MoveShardRequest { ns: ns.clone(), shard: shard.clone(), to_cell: to.clone(), planned: !unplanned };
            let started = reg.move_shard(req).await.map_err(ops::failed)?.into_inner();
            let from_epoch = started.owner.as_ref().map_or(0, |o| o.epoch);
            eprintln!(
                "moving {ns}/{shard} to {to} ({})...",
                if unplanned { "unplanned: waiting out the source's lease" } else { "planned: waiting for the source's seal" }
            );
            // Long operations show progress: poll until the new owner is active.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            loop {
                let o = reg.get_owner(rpb::GetOwnerRequest { ns: ns.clone(), shard: shard.clone() }).await.map_err(ops::failed)?.into_inner().owner;
                if let Some(o) = o.filter(|o| o.cell == to && o.state == rpb::ShardState::Active as i32 && o.epoch > from_epoch) {
                    emit(gw.output, &ops::owner_json(&o));
                    return Ok(());
                }
                if std::time::Instant::now() > deadline {
                    return Err(format!("the move of {ns}/{shard} to {to} has not completed after 60 s; see `holdfast shard owner {ns} {shard}`"));
                }
                eprint!(".");
                tokio::time::sleep(std::time::Duration::from_millis(250)).await;
            }
        }
    }
    Ok(())
}

pub async fn lock(cmd: LockCmd) -> Result<(), String> {
    match cmd {
        LockCmd::Acquire { target, name, ttl_ms, wait_ms, value } => {
            let session = call(&target.endpoint, |ch| {
                let req = pb::CreateSessionRequest { shard: shard_ref(&target), ttl_ms, client_label: "holdfast-cli".into() };
                async move { LockServiceClient::new(ch).create_session(req).await }
            })
            .await?
            .into_inner()
            .session_id;
            let request_id = format!("cli-{session:x}");
            let r = call(&target.endpoint, |ch| {
                let req = pb::AcquireRequest {
                    shard: shard_ref(&target),
                    name: name.clone(),
                    session_id: session,
                    mode: pb::Mode::Exclusive as i32,
                    wait_timeout_ms: wait_ms,
                    request_id: request_id.clone(),
                    value: value.clone().into_bytes(),
                };
                async move { LockServiceClient::new(ch).acquire(req).await }
            })
            .await?
            .into_inner();
            emit(
                target.output,
                &serde_json::json!({
                    "lock": name, "token": r.token.to_string(), "epoch": r.epoch, "session": format!("{session:#018x}"),
                    "ttl_remaining_ms": r.ttl_remaining_ms,
                    "note": "no keep-alive from this command: the hold ends when the session's TTL runs out"
                }),
            );
        }
        LockCmd::Release { target, name, token } => {
            call(&target.endpoint, |ch| {
                let req = pb::ReleaseRequest { shard: shard_ref(&target), name: name.clone(), token };
                async move { LockServiceClient::new(ch).release(req).await }
            })
            .await?;
            emit(target.output, &serde_json::json!({ "lock": name, "released": token.to_string() }));
        }
        LockCmd::Describe { target, name } => {
            let d = call(&target.endpoint, |ch| {
                let req = pb::DescribeRequest { shard: shard_ref(&target), name: name.clone() };
                async move { LockServiceClient::new(ch).describe(req).await }
            })
            .await?
            .into_inner();
            let holders: Vec<_> = d
                .holders
                .iter()
                .map(|h| serde_json::json!({ "session": format!("{:#018x}", h.session_id), "token": h.token.to_string(), "held_for_ms": h.held_for_ms, "value": String::from_utf8_lossy(&h.value) }))
                .collect();
            let waiters: Vec<_> = d.waiters.iter().map(|w| serde_json::json!({ "session": w.session_id, "request_id": w.request_id })).collect();
            emit(
                target.output,
                &serde_json::json!({
                    "lock": d.name, "holders": holders, "waiters": waiters, "token_floor": d.token_floor.to_string(),
                    "epoch": d.epoch, "lock_delayed": d.lock_delayed, "revision": d.revision,
                    "last_break": d.last_break.map(|b| serde_json::json!({ "by": b.by, "reason": b.reason, "new_floor": b.new_floor })),
                }),
            );
        }
        LockCmd::List { target, prefix } => {
            let r = call(&target.endpoint, |ch| {
                let req = pb::ListRequest { shard: shard_ref(&target), prefix: prefix.clone(), limit: 0 };
                async move { LockServiceClient::new(ch).list(req).await }
            })
            .await?
            .into_inner();
            let rows: Vec<_> = r
                .locks
                .iter()
                .map(|l| {
                    let tokens: Vec<String> = l.holders.iter().map(|h| h.token.to_string()).collect();
                    serde_json::json!({ "lock": l.name, "holders": tokens.join(","), "waiters": l.waiters })
                })
                .collect();
            emit(target.output, &serde_json::Value::Array(rows));
        }
        LockCmd::Watch { target, name, from_revision } => {
            let mut stream = call(&target.endpoint, |ch| {
                let req = pb::WatchRequest { shard: shard_ref(&target), name: name.clone(), from_revision };
                async move { LockServiceClient::new(ch).watch(req).await }
            })
            .await?
            .into_inner();
            while let Some(batch) = stream.message().await.map_err(ops::failed)? {
                for e in batch.events {
                    let kind = pb::EventKind::try_from(e.kind).map_or("?".to_owned(), |k| k.as_str_name().to_lowercase());
                    let reason = pb::EndReason::try_from(e.reason).ok().filter(|r| *r != pb::EndReason::Unspecified).map(|r| r.as_str_name().to_lowercase());
                    emit(
                        target.output,
                        &serde_json::json!({ "revision": e.revision, "event": kind, "reason": reason, "session": format!("{:#018x}", e.session_id), "token": e.token.to_string() }),
                    );
                }
            }
        }
        LockCmd::Exec { target, name, ttl_ms, wait_ms, command } => {
            return crate::exec::run(&target.endpoint, &target.ns, &target.shard, &name, ttl_ms, wait_ms, &command).await
        }
        LockCmd::Check { target, name, token } => {
            let r = call(&target.endpoint, |ch| {
                let req = pb::CheckTokenRequest { shard: shard_ref(&target), name: name.clone(), token };
                async move { LockServiceClient::new(ch).check_token(req).await }
            })
            .await?
            .into_inner();
            let current = r.status == pb::TokenStatus::Current as i32;
            emit(target.output, &serde_json::json!({ "lock": name, "token": token.to_string(), "status": if current { "CURRENT" } else { "STALE" } }));
        }
    }
    Ok(())
}

async fn ns_registry(cmd: NsCmd) -> Result<(), String> {
    match cmd {
        NsCmd::Create { gw, name, settings, posture, place_on } => {
            let posture = match posture.as_str() {
                "fail-closed" => pb::Posture::FailClosed,
                "fail-open" => pb::Posture::FailOpen,
                other => return Err(format!("--posture {other:?}: expected fail-closed or fail-open")),
            } as i32;
            let config = apb::NamespaceConfig { posture, ..settings.config(name.clone()) };
            let mut reg = ops::registry(&gw).await?;
            let r = reg.create_namespace(rpb::CreateNamespaceRequest { config: Some(config) }).await.map_err(ops::failed)?.into_inner();
            if let Some(cell) = place_on {
                reg.place_shard(rpb::PlaceShardRequest { ns: name, shard: "default".into(), cell }).await.map_err(ops::failed)?;
            }
            emit(gw.output, &r.config.as_ref().map(ops::namespace_json).unwrap_or_default());
        }
        NsCmd::Get { gw, name } => {
            let r = ops::registry(&gw).await?.get_namespace(rpb::GetNamespaceRequest { name }).await.map_err(ops::failed)?.into_inner();
            emit(gw.output, &r.config.as_ref().map(ops::namespace_json).unwrap_or_default());
        }
        NsCmd::List { gw } => {
            let r = ops::registry(&gw).await?.list_namespaces(rpb::ListNamespacesRequest {}).await.map_err(ops::failed)?.into_inner();
            emit(gw.output, &serde_json::Value::Array(r.configs.iter().map(ops::namespace_json).collect()));
        }
        NsCmd::Apply { .. } => unreachable!("handled by ns()"),
    }
    Ok(())
}
