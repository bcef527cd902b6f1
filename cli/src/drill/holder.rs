//! A lock holder in its own OS process, so a drill can SIGSTOP it for real: a
//! `holdfast demo-worker` that takes one lock through a gateway, prints its token and
//! session, and writes each line it is sent to the drill's fenced resource (served here
//! over HTTP) with that token — without checking its lease, as a paused process that
//! wakes up would. The drill records every step of it in the history.

use super::observe::Owners;
use super::resource::Resource;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use holdfast_core::{CellId, FencingToken, LockName, NamespaceName, RegionId, SessionId, ShardKey, ShardName};
use holdfast_drills::history::{EventKind, LockKey, SessionRef};
use holdfast_drills::record::Recorder;
use serde_json::{json, Value};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// Serves `resource` on 127.0.0.1 for holder processes; returns the write URL.
pub async fn serve(resource: Arc<Resource>) -> Result<String, String> {
    let app = Router::new().route("/write", post(write)).with_state(resource);
    Ok(format!("{}/write", crate::remote::serve_local(app).await?))
}

async fn write(State(resource): State<Arc<Resource>>, Json(b): Json<Value>) -> (StatusCode, Json<Value>) {
    let field = |k: &str| b[k].as_str().unwrap_or_default().to_owned();
    let (Ok(ns), Ok(shard), Ok(lock)) = (NamespaceName::new(field("ns")), ShardName::new(field("shard")), LockName::new(field("lock"))) else {
        return (StatusCode::BAD_REQUEST, Json(json!({ "accepted": false, "why": "bad lock" })));
    };
    let token = FencingToken(field("token").parse().unwrap_or(0));
    if resource.write(&ShardKey::new(ns, shard), &lock, token, field("value").as_bytes()) {
        (StatusCode::OK, Json(json!({ "accepted": true })))
    } else {
        (StatusCode::CONFLICT, Json(json!({ "accepted": false })))
    }
}

pub struct Holder {
    child: Child,
    pub pid: u32,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    pub key: LockKey,
    pub session: SessionRef,
    pub token: FencingToken,
    rec: Arc<Recorder>,
}

/// What a holder process is started with.
#[derive(Debug, Clone)]
pub struct HolderSpec<'a> {
    pub gateway: &'a str,
    /// The fenced resource's write URL.
    pub ledger: &'a str,
    pub ns: &'a str,
    pub shard: &'a str,
    pub lock: &'a str,
    pub ttl_ms: u64,
    pub tls: &'a crate::remote::ClientTls,
}

impl Holder {
    /// Starts the process and waits (up to `wait`) for its grant, recording it.
    pub async fn start(rec: Arc<Recorder>, owners: &Owners, spec: &HolderSpec<'_>, wait: Duration) -> Result<Holder, String> {
        let HolderSpec { gateway, ledger, ns, shard, lock, ttl_ms, tls } = spec.clone();
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let key = LockKey { ns: NamespaceName::new(ns).map_err(|e| e.to_string())?, name: LockName::new(lock).map_err(|e| e.to_string())? };
        let mut child = Command::new(exe)
            .args(["demo-worker", "--endpoint", gateway, "--ledger", ledger, "--lock", lock, "--ns", ns, "--shard", shard, "--ttl-ms", &ttl_ms.to_string()])
            .args(tls.args())
            .env("RUST_LOG", "error")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start a holder process: {e}"))?;
        let pid = child.id().ok_or("the holder exited at once")?;
        let stdin = child.stdin.take().ok_or("holder stdin")?;
        let mut stdout = BufReader::new(child.stdout.take().ok_or("holder stdout")?);
        // Its last words, kept to say why it got no grant (it reads stderr to the end,
        // so the process never blocks on a full pipe).
        let said = Arc::new(std::sync::Mutex::new(std::collections::VecDeque::<String>::new()));
        let mut stderr = BufReader::new(child.stderr.take().ok_or("holder stderr")?).lines();
        let keep = said.clone();
        tokio::spawn(async move {
            while let Ok(Some(l)) = stderr.next_line().await {
                let mut k = keep.lock().unwrap_or_else(|e| e.into_inner());
                k.push_back(l);
                if k.len() > 5 {
                    k.pop_front();
                }
            }
        });
        // The session is not known before the grant: the invocation names the cell.
        let pending = SessionRef { cell: cell(&owners.cell_now(ns, shard)), id: SessionId(0) };
        let op = rec.op();
        rec.record(EventKind::GrantInvoked { op, lock: key.clone(), session: pending });
        let mut line = String::new();
        let read = tokio::time::timeout(wait, stdout.read_line(&mut line)).await;
        let parsed = line.split_whitespace().collect::<Vec<_>>();
        let (token, id) = match (read, parsed.as_slice()) {
            (Ok(Ok(_)), ["TOKEN", t, "SESSION", s]) => (t.parse::<u64>().map_err(|e| e.to_string())?, s.parse::<u64>().map_err(|e| e.to_string())?),
            (read, _) => {
                rec.record(EventKind::GrantUnknown { op });
                let how = match read {
                    Err(_) => format!("no grant within {wait:?}"),
                    Ok(Ok(0)) => {
                        let status = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
                        format!("it exited ({}) without a grant", status.ok().and_then(Result::ok).map_or("status unknown".into(), |s| s.to_string()))
                    }
                    Ok(_) => "it answered something else".to_owned(),
                };
                let _ = child.start_kill();
                let last = said.lock().unwrap_or_else(|e| e.into_inner()).iter().cloned().collect::<Vec<_>>().join(" | ");
                return Err(format!("the holder process: {how} (it said {line:?}; its stderr: {last:?})"));
            }
        };
        let token = FencingToken(token);
        let (c, r) = owners.at(ns, shard, token.epoch().0);
        let session = SessionRef { cell: cell(&c), id: SessionId(id) };
        rec.record(EventKind::GrantOk {
            op,
            lock: key.clone(),
            session: session.clone(),
            token,
            region: RegionId::new(r).unwrap_or_else(|_| RegionId::new("unknown").expect("valid")),
            cell: cell(&c),
        });
        Ok(Holder { child, pid, stdin, stdout, key, session, token, rec })
    }

    /// Sends one write through the holder; `Some(true)` accepted, `Some(false)`
    /// rejected, `None` unknown.
    pub async fn write(&mut self, value: &str) -> Option<bool> {
        let op = self.rec.op();
        self.rec.record(EventKind::WriteAttempt { op, lock: self.key.clone(), token: self.token, resource: "drill-ledger".into() });
        let mut line = String::new();
        let sent = self.stdin.write_all(format!("{value}\n").as_bytes()).await.is_ok() && self.stdin.flush().await.is_ok();
        let answered = sent && matches!(tokio::time::timeout(Duration::from_secs(10), self.stdout.read_line(&mut line)).await, Ok(Ok(n)) if n > 0);
        let verdict = match (answered, line.trim()) {
            (true, "ACCEPTED") => Some(true),
            (true, "REJECTED") => Some(false),
            _ => None,
        };
        self.rec.record(match verdict {
            Some(true) => EventKind::WriteAccepted { op },
            Some(false) => EventKind::WriteRejected { op },
            None => EventKind::WriteUnknown { op },
        });
        verdict
    }

    /// Kills the process; its session ends when its lease runs out.
    pub async fn kill(mut self) {
        self.rec.record(EventKind::SessionExpired { session: self.session.clone(), at_ms: self.rec.ms() });
        let _ = self.child.kill().await;
    }
}

fn cell(name: &str) -> CellId {
    CellId::new(name).unwrap_or_else(|_| CellId::new("unknown").expect("valid"))
}
