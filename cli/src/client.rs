//! Lock, namespace and shard commands. Lock commands speak LockService, which a
//! gateway and a cell both serve; `ns create|get|list` and `shard owner|move|list` ask
//! the registry through a gateway; `ns apply` and `shard adopt|seal|served` are the
//! admin-mode calls to one cell (`CellAdmin`), for a cell run without a registry.

use crate::ops::{emit, Gw, Output};
use crate::remote::{ClientTls, Remote};
use clap::{Args, Subcommand};
use holdfast_core::{Intent, Posture};
use holdfast_proto::admin::v1 as apb;
use holdfast_proto::admin::v1::cell_admin_client::CellAdminClient;
use holdfast_proto::json::{
    session_hex, AutoFailoverView, CheckView, EventView, GrantView, LockSummaryView, LockView, NamespaceSpec, NamespaceView, OwnerView,
};
use holdfast_proto::lock::v1 as pb;
use holdfast_proto::lock::v1::lock_service_client::LockServiceClient;
use holdfast_proto::registry::v1 as rpb;
use holdfast_proto::registry::v1::registry_service_client::RegistryServiceClient;
use serde::Serialize;

#[derive(Debug, Args, Clone)]
pub struct Target {
    /// Gateways' gRPC addresses, or a cell's nodes' client addresses, comma-separated
    /// (names or IPs; NOT_LEADER is followed, an endpoint that does not answer is
    /// skipped).
    #[arg(long = "endpoints", visible_alias = "endpoint", env = "HOLDFAST_ENDPOINTS", default_value = "127.0.0.1:7000")]
    endpoints: String,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    output: Output,
    /// Namespace.
    #[arg(long, default_value = "default")]
    ns: String,
    /// Shard of the namespace.
    #[arg(long, default_value = "default")]
    shard: String,
    #[command(flatten)]
    tls: ClientTls,
}

impl Target {
    fn remote(&self) -> Result<Remote, String> {
        Remote::new(&self.endpoints, &self.tls)
    }

    fn shard_ref(&self) -> Option<pb::ShardRef> {
        Some(pb::ShardRef::named(self.ns.clone(), self.shard.clone()))
    }
}

/// A namespace's settings, as `ns create` (registry) and `ns apply` (admin mode) take
/// them; unset means the intent's default.
#[derive(Debug, Args, Clone)]
pub struct NsSettings {
    #[arg(long)]
    owner: String,
    /// efficiency, correctness or leadership.
    #[arg(long, default_value = "correctness")]
    intent: Intent,
    /// After a hold ends without a release (expiry, break, max hold), the lock stays
    /// ungranted this long. Default by intent: 5000 for correctness and leadership, 0
    /// for efficiency; 0 given explicitly means none.
    #[arg(long)]
    lock_delay_ms: Option<u64>,
    #[arg(long)]
    ttl_min_ms: Option<u64>,
    #[arg(long)]
    ttl_max_ms: Option<u64>,
    #[arg(long)]
    max_hold_ms: Option<u64>,
}

impl NsSettings {
    fn spec(self, name: String, posture: Option<Posture>) -> NamespaceSpec {
        NamespaceSpec {
            name,
            owner: self.owner,
            intent: Some(self.intent),
            posture,
            ttl_min_ms: self.ttl_min_ms,
            ttl_max_ms: self.ttl_max_ms,
            max_hold_ms: self.max_hold_ms,
            lock_delay_ms: self.lock_delay_ms,
            ..NamespaceSpec::default()
        }
    }
}

/// What `ns update` changes; unset flags leave the setting as it is.
#[derive(Debug, Args, Clone)]
pub struct NsChange {
    #[arg(long)]
    owner: Option<String>,
    /// fail-closed or fail-open (efficiency namespaces only).
    #[arg(long)]
    posture: Option<Posture>,
    #[arg(long)]
    ttl_min_ms: Option<u64>,
    #[arg(long)]
    ttl_max_ms: Option<u64>,
    /// 0: no max hold.
    #[arg(long)]
    max_hold_ms: Option<u64>,
    /// 0: no lock-delay.
    #[arg(long)]
    lock_delay_ms: Option<u64>,
    #[arg(long)]
    max_keys: Option<u32>,
    #[arg(long)]
    max_sessions: Option<u32>,
    #[arg(long)]
    max_waiters_per_lock: Option<u32>,
    #[arg(long)]
    max_value_bytes: Option<u32>,
    #[arg(long)]
    acquires_per_second: Option<u32>,
}

impl NsChange {
    /// `c` with the asked changes; an error when nothing was asked.
    fn apply(&self, mut c: apb::NamespaceConfig) -> Result<apb::NamespaceConfig, String> {
        let before = c.clone();
        let set = |field: &mut u64, v: Option<u64>| {
            if let Some(v) = v {
                *field = v;
            }
        };
        let set32 = |field: &mut u32, v: Option<u32>| {
            if let Some(v) = v {
                *field = v;
            }
        };
        if let Some(o) = &self.owner {
            c.owner = o.clone();
        }
        if let Some(p) = self.posture {
            c.posture = holdfast_proto::convert::posture_to(p);
        }
        set(&mut c.ttl_min_ms, self.ttl_min_ms);
        set(&mut c.ttl_max_ms, self.ttl_max_ms);
        set(&mut c.max_hold_ms, self.max_hold_ms);
        if let Some(d) = self.lock_delay_ms {
            c.lock_delay_ms = Some(d);
        }
        let quotas = [self.max_keys, self.max_sessions, self.max_waiters_per_lock, self.max_value_bytes, self.acquires_per_second];
        if quotas.iter().any(Option::is_some) {
            let q = c.quotas.get_or_insert_with(Default::default);
            set32(&mut q.max_keys, self.max_keys);
            set32(&mut q.max_sessions, self.max_sessions);
            set32(&mut q.max_waiters_per_lock, self.max_waiters_per_lock);
            set32(&mut q.max_value_bytes, self.max_value_bytes);
            set32(&mut q.acquires_per_second, self.acquires_per_second);
        }
        if c == before {
            return Err("nothing to change: give at least one setting (holdfast ns update --help)".into());
        }
        Ok(c)
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
        /// fail-closed or fail-open (efficiency namespaces only); default by intent.
        #[arg(long)]
        posture: Option<Posture>,
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
    /// Change a namespace's settings in the registry: only the flags given change,
    /// the rest stays. The registry refuses an update made from a stale read (another
    /// operator's change in between); this command then reads again and retries.
    ///
    /// Example: holdfast ns update payments --max-sessions 20000 --ttl-max-ms 120000
    Update {
        #[command(flatten)]
        gw: Gw,
        name: String,
        #[command(flatten)]
        change: NsChange,
    },
    /// A namespace's automatic failover: with --on, once a cell stops renewing its
    /// ownership lease and the lease runs out, the registry moves the namespace's shards
    /// off it by itself (docs/registry.md, "Automatic failover"). Off by default. With
    /// neither --on nor --off: shows it.
    ///
    /// Example: holdfast ns auto-failover payments --on --fallback west
    AutoFailover {
        #[command(flatten)]
        gw: Gw,
        name: String,
        #[arg(long, conflicts_with = "off")]
        on: bool,
        #[arg(long)]
        off: bool,
        /// The region its shards go to first (default: any active region).
        #[arg(long, requires = "on")]
        fallback: Option<String>,
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
    /// Example: holdfast shard served --endpoints 127.0.0.1:7004
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
    /// Place a new shard of a namespace on a cell (any shard name: a namespace's
    /// shards may spread over cells and regions). Placing a shard where it already
    /// lives is accepted; moving one is `shard move`.
    ///
    /// Example: holdfast shard place payments eu-accounts --cell west-1
    Place {
        #[command(flatten)]
        gw: Gw,
        ns: String,
        shard: String,
        #[arg(long)]
        cell: String,
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
        /// With --unplanned: you have confirmed the source's cells are down or cut off
        /// from every client, so the move completes at once instead of after the source's
        /// ownership lease (35 minutes by default). Audited with --reason. What still
        /// holds then, and what does not: docs/guarantees.md.
        #[arg(long, requires_all = ["unplanned", "reason"])]
        fence_confirmed: bool,
        /// Why the fencing is confirmed (recorded in the audit log).
        #[arg(long)]
        reason: Option<String>,
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
    /// HOLDFAST_TOKEN, the session is kept alive, and the command (its whole process
    /// group) is stopped if the lease is lost; SIGINT and SIGTERM are passed on to it,
    /// then the lock is released.
    ///
    /// Exit status: the command's own (128+N if signal N ended it); 75 the lock was not
    /// acquired; 76 the lease was lost while it ran; 127 it could not be started; 1
    /// anything else.
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

/// What `lock acquire` prints.
#[derive(Debug, Serialize)]
struct Acquired {
    lock: String,
    session: String,
    #[serde(flatten)]
    grant: GrantView,
    note: &'static str,
}

#[derive(Debug, Serialize)]
struct Released {
    lock: String,
    released: String,
}

#[derive(Debug, Serialize)]
struct Checked {
    lock: String,
    token: String,
    #[serde(flatten)]
    check: CheckView,
}

pub async fn ns(cmd: NsCmd) -> Result<(), String> {
    let (target, settings, version) = match cmd {
        NsCmd::Apply { target, settings, version } => (target, settings, version),
        other => return ns_registry(other).await,
    };
    let config = apb::NamespaceConfig { version, ..settings.spec(target.ns.clone(), None).to_pb() };
    let r = target
        .remote()?
        .call(|ch| {
            let config = config.clone();
            async move { CellAdminClient::new(ch).apply_namespace(apb::ApplyNamespaceRequest { config: Some(config) }).await }
        })
        .await?;
    emit(target.output, &serde_json::json!({ "namespace": target.ns, "version": r.version }));
    Ok(())
}

pub async fn shard(cmd: ShardCmd) -> Result<(), String> {
    match cmd {
        ShardCmd::Adopt { target, epoch } => {
            let req = apb::AdoptShardRequest { ns: target.ns.clone(), shard: target.shard.clone(), epoch, delayed_locks: vec![] };
            let r = target
                .remote()?
                .call(|ch| {
                    let req = req.clone();
                    async move { CellAdminClient::new(ch).adopt_shard(req).await }
                })
                .await?;
            emit(target.output, &serde_json::json!({ "ns": target.ns, "shard": target.shard, "epoch": r.epoch }));
        }
        ShardCmd::Seal { target, epoch } => {
            let req = apb::SealShardRequest { ns: target.ns.clone(), shard: target.shard.clone(), epoch };
            let r = target
                .remote()?
                .call(|ch| {
                    let req = req.clone();
                    async move { CellAdminClient::new(ch).seal_shard(req).await }
                })
                .await?;
            emit(
                target.output,
                &serde_json::json!({ "ns": target.ns, "shard": target.shard, "highest_token": r.highest_token.to_string(), "held_locks": r.held_locks }),
            );
        }
        ShardCmd::Served { target } => {
            let r = target.remote()?.call(|ch| async move { CellAdminClient::new(ch).status(apb::CellStatusRequest {}).await }).await?;
            let shards: Vec<_> = r
                .shards
                .iter()
                .map(|s| serde_json::json!({ "ns": s.ns, "shard": s.shard, "epoch": s.epoch, "seq": s.seq, "sealed": s.sealed, "keys": s.keys }))
                .collect();
            emit(target.output, &shards);
        }
        ShardCmd::Owner { gw, ns, shard } => {
            let req = rpb::GetOwnerRequest { ns, shard, fresh: true };
            let r = gw.remote()?.call(|ch| registry(ch, req.clone(), |mut c, r| async move { c.get_owner(r).await })).await?;
            emit(gw.output, &r.owner.as_ref().map(OwnerView::from));
        }
        ShardCmd::List { gw, ns } => {
            let req = rpb::ListShardsRequest { ns, cell: String::new() };
            let r = gw.remote()?.call(|ch| registry(ch, req.clone(), |mut c, r| async move { c.list_shards(r).await })).await?;
            emit(gw.output, &r.shards.iter().map(OwnerView::from).collect::<Vec<_>>());
        }
        ShardCmd::Place { gw, ns, shard, cell } => {
            let remote = gw.remote()?;
            let req = rpb::PlaceShardRequest { ns: ns.clone(), shard: shard.clone(), cell: cell.clone() };
            // Sent again after a lost answer, a placement that did happen answers
            // ALREADY_EXISTS: then the owner says whether it is this placement.
            let owner = match remote.call_status(|ch| registry(ch, req.clone(), |mut c, r| async move { c.place_shard(r).await })).await {
                Ok(r) => r.owner,
                Err(s) if holdfast_rpc::status::code_of(&s) == Some(holdfast_core::ErrorCode::AlreadyExists) => {
                    let get = rpb::GetOwnerRequest { ns: ns.clone(), shard: shard.clone(), fresh: true };
                    let o = remote.call(|ch| registry(ch, get.clone(), |mut c, r| async move { c.get_owner(r).await })).await?.owner;
                    match o {
                        Some(o) if o.cell == cell || o.to_cell == cell => {
                            eprintln!("{ns}/{shard} is on {cell} already: nothing to do");
                            Some(o)
                        }
                        Some(o) => return Err(format!("{ns}/{shard} lives on {} already; to move it: holdfast shard move {ns} {shard} --to {cell}", o.cell)),
                        None => return Err(s.message().to_owned()),
                    }
                }
                Err(s) => return Err(s.message().to_owned()),
            };
            emit(gw.output, &owner.as_ref().map(OwnerView::from));
        }
        ShardCmd::Move { gw, ns, shard, to, unplanned, fence_confirmed, reason } => {
            let remote = gw.remote()?;
            let req = rpb::MoveShardRequest {
                ns: ns.clone(),
                shard: shard.clone(),
                to_cell: to.clone(),
                planned: !unplanned,
                fence_confirmed,
                reason: reason.unwrap_or_default(),
            };
            let started = remote.once(|ch| registry(ch, req.clone(), |mut c, r| async move { c.move_shard(r).await })).await?;
            // A confirmed fence completes at once: the answer is the new owner already.
            let from_epoch = if fence_confirmed { 0 } else { started.owner.as_ref().map_or(0, |o| o.epoch) };
            eprintln!(
                "moving {ns}/{shard} to {to} ({})...",
                match (unplanned, fence_confirmed) {
                    (true, true) => "unplanned, fencing confirmed: at once",
                    (true, false) => "unplanned: waiting out the source's lease",
                    _ => "planned: waiting for the source's seal",
                }
            );
            // Long operations show progress: poll until the new owner is active.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            let get = rpb::GetOwnerRequest { ns: ns.clone(), shard: shard.clone(), fresh: true };
            loop {
                let o = remote.call(|ch| registry(ch, get.clone(), |mut c, r| async move { c.get_owner(r).await })).await?.owner;
                if let Some(o) = o.filter(|o| o.cell == to && o.state == rpb::ShardState::Active as i32 && o.epoch > from_epoch) {
                    emit(gw.output, &OwnerView::from(&o));
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

/// A RegistryService call on `ch`.
pub(crate) async fn registry<Req, T, F, Fut>(ch: holdfast_rpc::Channel, req: Req, f: F) -> Result<tonic::Response<T>, tonic::Status>
where
    F: FnOnce(RegistryServiceClient<holdfast_rpc::Channel>, Req) -> Fut,
    Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    f(RegistryServiceClient::new(ch), req).await
}

/// A LockService call on `ch`.
pub(crate) async fn locks<Req, T, F, Fut>(ch: holdfast_rpc::Channel, req: Req, f: F) -> Result<tonic::Response<T>, tonic::Status>
where
    F: FnOnce(LockServiceClient<holdfast_rpc::Channel>, Req) -> Fut,
    Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    f(LockServiceClient::new(ch), req).await
}

pub async fn lock(cmd: LockCmd) -> Result<(), String> {
    match cmd {
        LockCmd::Acquire { target, name, ttl_ms, wait_ms, value } => {
            let remote = target.remote()?;
            let req = pb::CreateSessionRequest { shard: target.shard_ref(), ttl_ms, client_label: "holdfast-cli".into() };
            let session = remote.call(|ch| locks(ch, req.clone(), |mut c, r| async move { c.create_session(r).await })).await?.session_id;
            let req = pb::AcquireRequest {
                shard: target.shard_ref(),
                name: name.clone(),
                session_id: session,
                mode: pb::Mode::Exclusive as i32,
                wait_timeout_ms: wait_ms,
                // One id for every retry of this command: a retry never grants twice.
                request_id: format!("cli-{session:x}"),
                value: value.into_bytes(),
            };
            let r = remote.call(|ch| locks(ch, req.clone(), |mut c, r| async move { c.acquire(r).await })).await?;
            emit(
                target.output,
                &Acquired {
                    lock: name,
                    session: session_hex(session),
                    grant: GrantView::from(&r),
                    note: "no keep-alive from this command: the hold ends when the session's TTL runs out",
                },
            );
        }
        LockCmd::Release { target, name, token } => {
            let req = pb::ReleaseRequest { shard: target.shard_ref(), name: name.clone(), token, session_id: 0 };
            target.remote()?.call(|ch| locks(ch, req.clone(), |mut c, r| async move { c.release(r).await })).await?;
            emit(target.output, &Released { lock: name, released: token.to_string() });
        }
        LockCmd::Describe { target, name } => {
            let req = pb::DescribeRequest { shard: target.shard_ref(), name };
            let d = target.remote()?.call(|ch| locks(ch, req.clone(), |mut c, r| async move { c.describe(r).await })).await?;
            emit(target.output, &LockView::from_pb(&d, session_hex));
        }
        LockCmd::List { target, prefix } => {
            let req = pb::ListRequest { shard: target.shard_ref(), prefix, limit: 0 };
            let r = target.remote()?.call(|ch| locks(ch, req.clone(), |mut c, r| async move { c.list(r).await })).await?;
            emit(target.output, &r.locks.iter().map(LockSummaryView::from).collect::<Vec<_>>());
        }
        LockCmd::Watch { target, name, from_revision } => {
            let req = pb::WatchRequest { shard: target.shard_ref(), name, from_revision };
            let mut stream = target.remote()?.call(|ch| locks(ch, req.clone(), |mut c, r| async move { c.watch(r).await })).await?;
            while let Some(batch) = stream.message().await.map_err(|s| holdfast_rpc::status::one_line(&s))? {
                for e in &batch.events {
                    emit(target.output, &EventView::from_pb(e, session_hex));
                }
            }
        }
        LockCmd::Exec { target, name, ttl_ms, wait_ms, command } => {
            let endpoints = crate::remote::endpoint_list(&target.endpoints)?;
            let transport = crate::remote::transport(&target.tls)?;
            let client =
                holdfast_client::Client::connect_via(transport, &endpoints, holdfast_client::ClientConfig::default()).await.map_err(|e| e.to_string())?;
            return crate::exec::run(client, &target.ns, &target.shard, &name, ttl_ms, wait_ms, &command).await;
        }
        LockCmd::Check { target, name, token } => {
            let req = pb::CheckTokenRequest { shard: target.shard_ref(), name: name.clone(), token };
            let r = target.remote()?.call(|ch| locks(ch, req.clone(), |mut c, r| async move { c.check_token(r).await })).await?;
            emit(target.output, &Checked { lock: name, token: token.to_string(), check: CheckView::from(&r) });
        }
    }
    Ok(())
}

fn namespace_view(c: Option<&apb::NamespaceConfig>) -> Result<Option<NamespaceView>, String> {
    c.map(NamespaceView::try_from).transpose().map_err(|e| format!("the registry sent a config this command cannot read: {e}"))
}

async fn ns_registry(cmd: NsCmd) -> Result<(), String> {
    match cmd {
        NsCmd::Create { gw, name, settings, posture, place_on } => {
            let remote = gw.remote()?;
            let req = rpb::CreateNamespaceRequest { config: Some(settings.spec(name.clone(), posture).to_pb()) };
            let r = remote.once(|ch| registry(ch, req.clone(), |mut c, r| async move { c.create_namespace(r).await })).await?;
            if let Some(cell) = place_on {
                let req = rpb::PlaceShardRequest { ns: name, shard: "default".into(), cell };
                remote.once(|ch| registry(ch, req.clone(), |mut c, r| async move { c.place_shard(r).await })).await?;
            }
            emit(gw.output, &namespace_view(r.config.as_ref())?);
        }
        NsCmd::Get { gw, name } => {
            let req = rpb::GetNamespaceRequest { name };
            let r = gw.remote()?.call(|ch| registry(ch, req.clone(), |mut c, r| async move { c.get_namespace(r).await })).await?;
            emit(gw.output, &namespace_view(r.config.as_ref())?);
        }
        NsCmd::AutoFailover { gw, name, on, off, fallback } => {
            let remote = gw.remote()?;
            let view = if on || off {
                let req = rpb::SetAutoFailoverRequest {
                    ns: name.clone(),
                    auto_failover: Some(rpb::AutoFailover { enabled: on, fallback_region: fallback.unwrap_or_default() }),
                };
                let r = remote.once(|ch| registry(ch, req.clone(), |mut c, r| async move { c.set_auto_failover(r).await })).await?;
                AutoFailoverView::new(&name, r.auto_failover.as_ref())
            } else {
                let req = rpb::GetNamespaceRequest { name: name.clone() };
                let r = remote.call(|ch| registry(ch, req.clone(), |mut c, r| async move { c.get_namespace(r).await })).await?;
                AutoFailoverView::new(&name, r.auto_failover.as_ref())
            };
            emit(gw.output, &view);
        }
        NsCmd::List { gw } => {
            let r = gw.remote()?.call(|ch| registry(ch, rpb::ListNamespacesRequest {}, |mut c, r| async move { c.list_namespaces(r).await })).await?;
            let views = r.configs.iter().map(|c| namespace_view(Some(c))).collect::<Result<Vec<_>, _>>()?;
            emit(gw.output, &views);
        }
        NsCmd::Update { gw, name, change } => {
            let remote = gw.remote()?;
            let mut tries = 0;
            let updated = loop {
                let get = rpb::GetNamespaceRequest { name: name.clone() };
                let current = remote.call(|ch| registry(ch, get.clone(), |mut c, r| async move { c.get_namespace(r).await })).await?.config;
                let current = current.ok_or_else(|| format!("no namespace {name}"))?;
                let expected_version = current.version;
                let config = match change.apply(current.clone()) {
                    Ok(c) => c,
                    // Read again after a CONFLICT, with nothing left to change: our own
                    // update committed (its answer was lost and the retry came too late),
                    // or someone made the same change. Either way it is in.
                    Err(_) if tries > 0 => break Some(current),
                    Err(e) => return Err(e),
                };
                let req = rpb::UpdateNamespaceRequest { config: Some(config), expected_version };
                match remote.call_status(|ch| registry(ch, req.clone(), |mut c, r| async move { c.update_namespace(r).await })).await {
                    Ok(r) => break r.config,
                    Err(s) if holdfast_rpc::status::code_of(&s) == Some(holdfast_core::ErrorCode::Conflict) && tries < 3 => {
                        tries += 1;
                        eprintln!("{name} changed since it was read ({}); reading it again", s.message());
                    }
                    Err(s) => return Err(s.message().to_owned()),
                }
            };
            emit(gw.output, &namespace_view(updated.as_ref())?);
        }
        NsCmd::Apply { .. } => unreachable!("handled by ns()"),
    }
    Ok(())
}
