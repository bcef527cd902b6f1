//! `holdfast-bench control`: the safety checker's positive control (issue #20).
//!
//! The anomaly Jepsen reported for etcd's locks, played with real processes against a
//! real service. Holder A (a `holdfast-bench control-holder` process) takes a lock with
//! a short lease and writes to a resource. A is then SIGSTOPped (a GC pause, a frozen
//! VM), so its lease runs out; B is granted the lock, writes and releases. A resumes and
//! makes the write it was about to make, with the token it was granted. This process is
//! both the resource and the recorder: every grant, fault and write goes into a drill
//! history (`holdfast-drills`), and the drills' checker reads the whole history.
//!
//! The resource either accepts every write (what a lock user who does not fence gets)
//! or, with `--fenced`, is `holdfast-fence`'s `MemoryFence`. The checker must report
//! A's late write as a stale write accepted in every unfenced trial — on etcd and on
//! holdfast alike, since neither can stop a paused holder from acting — and none when
//! the resource checks tokens. The table is in docs/guarantees.md.
//!
//! etcd's token is the store revision its Lock answered at: every later grant answers
//! at a higher one. holdfast's is the fencing token.

use crate::{holdfast_lock, System, Target};
use holdfast_core::{CellId, FencingToken, LockName, NamespaceName, RegionId, SessionId};
use holdfast_drills::checker::{check, ViolationKind};
use holdfast_drills::history::{EventKind, FaultKind, LockKey, SessionRef};
use holdfast_drills::record::Recorder;
use holdfast_fence::{FencedStore, LockId, MemoryFence};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

#[derive(Debug, clap::Args)]
pub struct ControlArgs {
    #[arg(long, value_enum)]
    system: System,
    /// holdfast gateway(s) or cell nodes; etcd members.
    #[arg(long)]
    endpoints: String,
    #[arg(long, default_value_t = 5)]
    trials: u32,
    /// The holders' lease (session) TTL; etcd's is whole seconds.
    #[arg(long, default_value_t = 3_000)]
    ttl_ms: u64,
    /// The resource checks fencing tokens (holdfast-fence's MemoryFence); otherwise it
    /// accepts every write.
    #[arg(long)]
    fenced: bool,
    /// Where the history goes (JSON lines, the drills' format).
    #[arg(long)]
    history: PathBuf,
    #[command(flatten)]
    target: Target,
}

/// The paused holder: reads commands on stdin (`acquire`, `write`, anything else to
/// exit) and answers on stdout (`ready <session>`, `granted <token>`, `write <token>`).
#[derive(Debug, clap::Args)]
pub struct HolderArgs {
    #[arg(long, value_enum)]
    system: System,
    #[arg(long)]
    endpoints: String,
    #[arg(long)]
    lock: String,
    #[arg(long)]
    ttl_ms: u64,
    #[command(flatten)]
    target: Target,
}

/// One run's result: one JSON line.
#[derive(Debug, Serialize)]
struct ControlReport {
    system: System,
    label: String,
    fenced: bool,
    trials: u32,
    /// Trials whose history the checker found a stale write accepted in.
    trials_with_stale_write: usize,
    /// A's writes after its pause that the resource refused.
    late_writes_rejected: u32,
    /// Every violation the checker reported, by kind.
    violations: BTreeMap<String, usize>,
    malformed: usize,
    history: PathBuf,
}

/// A lock client of either system, with what the history needs: its session (lease)
/// and the token of its grant.
enum Holder {
    Holdfast(holdfast_lock::HoldfastLocker),
    #[cfg(feature = "etcd")]
    Etcd(Box<crate::etcd_lock::EtcdLocker>),
}

impl Holder {
    async fn connect(system: System, endpoints: &[String], target: &Target, ttl: Duration) -> Result<Holder, String> {
        match system {
            System::Holdfast => {
                let security = holdfast_lock::security(target.certs_dir.as_deref())?;
                Ok(Holder::Holdfast(holdfast_lock::HoldfastLocker::with_ttl(&security, endpoints, &target.ns, &target.shard, ttl).await?))
            }
            #[cfg(feature = "etcd")]
            System::Etcd => Ok(Holder::Etcd(Box::new(crate::etcd_lock::EtcdLocker::with_kept_lease(endpoints, ttl).await?))),
            #[cfg(not(feature = "etcd"))]
            System::Etcd => Err("built without the `etcd` feature: use scripts/control.sh".into()),
        }
    }

    fn session(&self) -> u64 {
        match self {
            Holder::Holdfast(h) => h.session_id(),
            #[cfg(feature = "etcd")]
            Holder::Etcd(e) => e.lease() as u64,
        }
    }

    /// Takes `name`, waiting as long as needed; the grant's token.
    async fn acquire(&mut self, name: &str) -> Result<u64, String> {
        use crate::Locker;
        match self {
            Holder::Holdfast(h) => {
                h.lock(name).await?;
                h.token().ok_or_else(|| "a grant without a token".to_owned())
            }
            #[cfg(feature = "etcd")]
            Holder::Etcd(e) => {
                e.lock(name).await?;
                Ok(e.revision() as u64)
            }
        }
    }

    async fn release(&mut self) -> Result<(), String> {
        use crate::Locker;
        match self {
            Holder::Holdfast(h) => h.unlock().await,
            #[cfg(feature = "etcd")]
            Holder::Etcd(e) => e.unlock().await,
        }
    }
}

fn endpoints(s: &str) -> Vec<String> {
    s.split(',').map(str::trim).filter(|e| !e.is_empty()).map(str::to_owned).collect()
}

/// `control-holder`: the process that is paused.
pub async fn holder(a: HolderArgs) -> Result<(), String> {
    let mut h = Holder::connect(a.system, &endpoints(&a.endpoints), &a.target, Duration::from_millis(a.ttl_ms)).await?;
    println!("ready {}", h.session());
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut token = None;
    while let Some(line) = lines.next_line().await.map_err(|e| e.to_string())? {
        match line.as_str() {
            "acquire" => {
                let t = h.acquire(&a.lock).await?;
                token = Some(t);
                println!("granted {t}");
            }
            // The holder believes it holds the lock: nothing it could check between
            // its decision to write and the write itself would help a paused process.
            "write" => println!("write {}", token.ok_or("a write before a grant")?),
            _ => break,
        }
    }
    Ok(())
}

/// The holder process, seen from the recorder.
struct Paused {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl Paused {
    fn start(a: &ControlArgs, lock: &str) -> Result<Paused, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut cmd = tokio::process::Command::new(exe);
        cmd.args(["control-holder", "--system", system_arg(a.system), "--endpoints", &a.endpoints, "--lock", lock]);
        cmd.args(["--ttl-ms", &a.ttl_ms.to_string(), "--ns", &a.target.ns, "--shard", &a.target.shard]);
        if let Some(d) = &a.target.certs_dir {
            cmd.arg("--certs-dir").arg(d);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start the holder: {e}"))?;
        let stdin = child.stdin.take().ok_or("the holder's stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("the holder's stdout")?).lines();
        Ok(Paused { child, stdin, stdout })
    }

    /// Sends `cmd` (if any) and reads the answer, which must start with `want`; the rest
    /// of it as a number.
    async fn ask(&mut self, cmd: Option<&str>, want: &str) -> Result<u64, String> {
        if let Some(cmd) = cmd {
            self.stdin.write_all(format!("{cmd}\n").as_bytes()).await.map_err(|e| e.to_string())?;
        }
        let line = self.stdout.next_line().await.map_err(|e| e.to_string())?.ok_or("the holder exited")?;
        line.strip_prefix(want).and_then(|n| n.trim().parse().ok()).ok_or_else(|| format!("the holder said {line:?}, not {want:?}"))
    }

    async fn signal(&self, sig: &str) -> Result<(), String> {
        let pid = self.child.id().ok_or("the holder exited")?;
        let ok = tokio::process::Command::new("kill").args([sig, &pid.to_string()]).status().await.map_err(|e| e.to_string())?.success();
        ok.then_some(()).ok_or_else(|| format!("kill {sig} {pid} failed"))
    }
}

fn system_arg(s: System) -> &'static str {
    match s {
        System::Holdfast => "holdfast",
        System::Etcd => "etcd",
    }
}

/// The resource: every write recorded, then accepted, or checked by the fence.
struct Resource {
    fence: Option<MemoryFence>,
}

impl Resource {
    fn write(&self, rec: &Recorder, lock: &LockKey, id: &LockId, token: u64) -> Result<bool, String> {
        let op = rec.op();
        rec.record(EventKind::WriteAttempt { op, lock: lock.clone(), token: FencingToken(token), resource: "ledger".into() });
        let accepted = match &self.fence {
            None => true,
            Some(f) => match f.write(id, FencingToken(token), b"entry", format!("written with {token}").as_bytes()) {
                Ok(_) => true,
                Err(e) if e.is_stale() => false,
                Err(e) => return Err(e.to_string()),
            },
        };
        rec.record(if accepted { EventKind::WriteAccepted { op } } else { EventKind::WriteRejected { op } });
        Ok(accepted)
    }
}

/// `control`: `--trials` pauses, each on a lock of its own, then the checker.
pub async fn control(a: ControlArgs) -> Result<(), String> {
    let eps = endpoints(&a.endpoints);
    let ttl = Duration::from_millis(a.ttl_ms);
    let rec = Recorder::create(&a.history)?;
    let resource = Resource { fence: a.fenced.then(|| MemoryFence::new("ledger")) };
    let cell = CellId::new(if a.system == System::Etcd { "etcd" } else { "east-1" }).map_err(|e| e.to_string())?;
    let ns = NamespaceName::new(a.target.ns.clone()).map_err(|e| e.to_string())?;
    let region = RegionId::new("control").map_err(|e| e.to_string())?;
    // Lock names of their own, so a run on a playground used before starts clean.
    let run = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0);
    let mut late_writes_rejected = 0;
    for i in 0..a.trials {
        let name = format!("control-{run}-{i}");
        let lock = LockKey { ns: ns.clone(), name: LockName::new(name.clone()).map_err(|e| e.to_string())? };
        let id = LockId::parse(&format!("{}/{}/{name}", a.target.ns, a.target.shard)).map_err(|e| e.to_string())?;
        let session = |id: u64| SessionRef { cell: cell.clone(), id: SessionId(id) };

        // A takes the lock and writes.
        let mut holder = Paused::start(&a, &name)?;
        let a_session = session(holder.ask(None, "ready").await?);
        let op = rec.op();
        rec.record(EventKind::GrantInvoked { op, lock: lock.clone(), session: a_session.clone() });
        let a_token = holder.ask(Some("acquire"), "granted").await?;
        rec.record(EventKind::GrantOk { op, lock: lock.clone(), session: a_session, token: FencingToken(a_token), region: region.clone(), cell: cell.clone() });
        let t = holder.ask(Some("write"), "write").await?;
        resource.write(&rec, &lock, &id, t)?;

        // A pauses; its lease runs out while B waits for the lock, takes it and writes.
        holder.signal("-STOP").await?;
        rec.record(EventKind::FaultInjected { kind: FaultKind::PauseHolder, target: format!("holder of {name}") });
        let mut b = Holder::connect(a.system, &eps, &a.target, ttl).await?;
        let b_session = session(b.session());
        let op = rec.op();
        rec.record(EventKind::GrantInvoked { op, lock: lock.clone(), session: b_session.clone() });
        let b_token = b.acquire(&name).await?;
        rec.record(EventKind::GrantOk {
            op,
            lock: lock.clone(),
            session: b_session.clone(),
            token: FencingToken(b_token),
            region: region.clone(),
            cell: cell.clone(),
        });
        resource.write(&rec, &lock, &id, b_token)?;
        let op = rec.op();
        rec.record(EventKind::ReleaseInvoked { op, lock: lock.clone(), session: b_session, token: FencingToken(b_token) });
        b.release().await?;
        rec.record(EventKind::ReleaseOk { op });

        // A resumes and makes the write it was about to make.
        holder.signal("-CONT").await?;
        rec.record(EventKind::FaultInjected { kind: FaultKind::Heal, target: format!("holder of {name}") });
        let t = holder.ask(Some("write"), "write").await?;
        if !resource.write(&rec, &lock, &id, t)? {
            late_writes_rejected += 1;
        }
        let _ = holder.stdin.write_all(b"exit\n").await;
        let _ = tokio::time::timeout(Duration::from_secs(10), holder.child.wait()).await;
        eprintln!("trial {i}: A's token {a_token}, B's token {b_token}, A's late write {}", if late_writes_rejected > i { "rejected" } else { "accepted" });
    }
    rec.flush();
    let report = check(&rec.history());
    let mut stale_locks = BTreeSet::new();
    for v in report.violations.iter().filter(|v| v.kind == ViolationKind::StaleWriteAccepted) {
        for e in &v.events {
            if let EventKind::WriteAttempt { lock, .. } = &e.event.kind {
                stale_locks.insert(lock.name.clone());
            }
        }
    }
    let mut violations = BTreeMap::new();
    for v in &report.violations {
        *violations.entry(v.kind.to_string()).or_default() += 1;
    }
    let out = ControlReport {
        system: a.system,
        label: a.target.label.clone(),
        fenced: a.fenced,
        trials: a.trials,
        trials_with_stale_write: stale_locks.len(),
        late_writes_rejected,
        violations,
        malformed: report.malformed.len(),
        history: a.history.clone(),
    };
    println!("{}", serde_json::to_string(&out).map_err(|e| e.to_string())?);
    Ok(())
}
