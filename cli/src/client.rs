//! Operator and user commands against a cell's client address. Output is JSON, one
//! object per command, so scripts can parse it.

use clap::{Args, Subcommand, ValueEnum};
use holdfast_proto::admin::v1 as apb;
use holdfast_proto::admin::v1::cell_admin_client::CellAdminClient;
use holdfast_proto::lock::v1 as pb;
use holdfast_proto::lock::v1::lock_service_client::LockServiceClient;
use std::future::Future;
use std::time::Duration;
use tonic::transport::Channel;

#[derive(Debug, Args, Clone)]
pub struct Target {
    /// A cell node's client address (any node: NOT_LEADER is followed once).
    #[arg(long, env = "HOLDFAST_ENDPOINT", default_value = "127.0.0.1:7001")]
    endpoint: String,
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

#[derive(Debug, Subcommand)]
pub enum NsCmd {
    /// Create or update a namespace on a cell (until the registry does this).
    ///
    /// Example: holdfast ns apply --ns payments --owner team-pay --intent correctness --version 1
    Apply {
        #[command(flatten)]
        target: Target,
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
        /// Only a higher version replaces what the cell has.
        #[arg(long, default_value_t = 1)]
        version: u64,
    },
}

#[derive(Debug, Subcommand)]
pub enum ShardCmd {
    /// Serve a shard on a cell at an epoch.
    ///
    /// Example: holdfast shard adopt --ns payments --shard default --epoch 1
    Adopt {
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        epoch: u32,
    },
    /// Stop serving a shard: its holds end with MOVED.
    ///
    /// Example: holdfast shard seal --ns payments --epoch 1
    Seal {
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        epoch: u32,
    },
    /// What the cell serves.
    ///
    /// Example: holdfast shard list --endpoint 127.0.0.1:7001
    List {
        #[command(flatten)]
        target: Target,
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

async fn connect(endpoint: &str) -> Result<Channel, String> {
    Channel::from_shared(format!("http://{endpoint}"))
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_secs(3))
        .connect()
        .await
        .map_err(|e| format!("cannot reach {endpoint}: {e}"))
}

/// Calls `f` on `endpoint`; on NOT_LEADER with a hint, once more on the hinted leader.
async fn call<T, F, Fut>(endpoint: &str, f: F) -> Result<T, String>
where
    F: Fn(Channel) -> Fut,
    Fut: Future<Output = Result<T, tonic::Status>>,
{
    match f(connect(endpoint).await?).await {
        Ok(v) => Ok(v),
        Err(s) => {
            let hint = s.metadata().get("holdfast-leader").and_then(|v| v.to_str().ok()).map(str::to_owned);
            match hint {
                Some(leader) if code(&s) == "NOT_LEADER" => f(connect(&leader).await?).await.map_err(describe_status),
                _ => Err(describe_status(s)),
            }
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

fn print(v: serde_json::Value) {
    println!("{}", serde_json::to_string_pretty(&v).expect("json"));
}

pub async fn ns(cmd: NsCmd) -> Result<(), String> {
    let NsCmd::Apply { target, owner, intent, lock_delay_ms, ttl_min_ms, ttl_max_ms, max_hold_ms, version } = cmd;
    let intent = match intent {
        IntentArg::Efficiency => pb::Intent::Efficiency,
        IntentArg::Correctness => pb::Intent::Correctness,
        IntentArg::Leadership => pb::Intent::Leadership,
    } as i32;
    let config = apb::NamespaceConfig {
        name: target.ns.clone(),
        owner,
        intent,
        ttl_min_ms,
        ttl_max_ms,
        max_hold_ms,
        lock_delay_ms,
        version,
        ..Default::default()
    };
    let r = call(&target.endpoint, |ch| {
        let config = config.clone();
        async move { CellAdminClient::new(ch).apply_namespace(apb::ApplyNamespaceRequest { config: Some(config) }).await }
    })
    .await?
    .into_inner();
    print(serde_json::json!({ "namespace": target.ns, "version": r.version }));
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
            print(serde_json::json!({ "ns": target.ns, "shard": target.shard, "epoch": r.epoch }));
        }
        ShardCmd::Seal { target, epoch } => {
            let r = call(&target.endpoint, |ch| {
                let req = apb::SealShardRequest { ns: target.ns.clone(), shard: target.shard.clone(), epoch };
                async move { CellAdminClient::new(ch).seal_shard(req).await }
            })
            .await?
            .into_inner();
            print(serde_json::json!({ "ns": target.ns, "shard": target.shard, "highest_token": r.highest_token, "held_locks": r.held_locks }));
        }
        ShardCmd::List { target } => {
            let r = call(&target.endpoint, |ch| async move { CellAdminClient::new(ch).status(apb::CellStatusRequest {}).await }).await?.into_inner();
            let shards: Vec<_> = r
                .shards
                .iter()
                .map(|s| serde_json::json!({ "ns": s.ns, "shard": s.shard, "epoch": s.epoch, "seq": s.seq, "sealed": s.sealed, "keys": s.keys }))
                .collect();
            print(serde_json::json!({ "shards": shards, "revision": r.revision, "sessions": r.sessions }));
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
            print(serde_json::json!({
                "lock": name, "token": r.token, "epoch": r.epoch, "session": session,
                "ttl_remaining_ms": r.ttl_remaining_ms,
                "note": "no keep-alive from this command: the hold ends when the session's TTL runs out"
            }));
        }
        LockCmd::Release { target, name, token } => {
            call(&target.endpoint, |ch| {
                let req = pb::ReleaseRequest { shard: shard_ref(&target), name: name.clone(), token };
                async move { LockServiceClient::new(ch).release(req).await }
            })
            .await?;
            print(serde_json::json!({ "lock": name, "released": token }));
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
                .map(|h| serde_json::json!({ "session": h.session_id, "token": h.token, "held_for_ms": h.held_for_ms, "value": String::from_utf8_lossy(&h.value) }))
                .collect();
            let waiters: Vec<_> = d.waiters.iter().map(|w| serde_json::json!({ "session": w.session_id, "request_id": w.request_id })).collect();
            print(serde_json::json!({
                "lock": d.name, "holders": holders, "waiters": waiters, "token_floor": d.token_floor,
                "epoch": d.epoch, "lock_delayed": d.lock_delayed, "revision": d.revision,
                "last_break": d.last_break.map(|b| serde_json::json!({ "by": b.by, "reason": b.reason, "new_floor": b.new_floor })),
            }));
        }
        LockCmd::Check { target, name, token } => {
            let r = call(&target.endpoint, |ch| {
                let req = pb::CheckTokenRequest { shard: shard_ref(&target), name: name.clone(), token };
                async move { LockServiceClient::new(ch).check_token(req).await }
            })
            .await?
            .into_inner();
            let current = r.status == pb::TokenStatus::Current as i32;
            print(serde_json::json!({ "lock": name, "token": token, "status": if current { "CURRENT" } else { "STALE" } }));
        }
    }
    Ok(())
}
