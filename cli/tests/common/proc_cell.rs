//! A 3-node cell of real `holdfast cell run` processes on loopback (insecure: these
//! tests are about processes, clocks and membership, not certificates), and the
//! helpers its tests share: sessions, renewals, acquire requests, and a recorded
//! acquire/release workload for the drills' checker.

use holdfast_drills::record::Recorder;
use holdfast_proto::lock::v1 as pb;
use holdfast_proto::lock::v1::lock_service_client::LockServiceClient;
use holdfast_proto::raft::v1 as rpb;
use holdfast_proto::raft::v1::raft_admin_client::RaftAdminClient;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

use super::BIN;

pub const WAIT: Duration = Duration::from_secs(30);
pub const TTL_MS: u64 = 3_000;
pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

pub struct Node {
    pub id: u64,
    pub child: Child,
    pub raft: String,
    pub client: String,
}

pub struct ProcCell {
    pub nodes: Vec<Node>,
    /// tmpfs mounted as node data directories (unmounted on drop).
    pub mounts: Vec<PathBuf>,
    pub dir: tempfile::TempDir,
    pub faketime: Option<PathBuf>,
    /// Nodes run under the disk-fault shim ([`ProcCell::disk_fault`]).
    pub disk_faults: bool,
}

/// How the node processes of a [`ProcCell`] run.
#[derive(Debug, Clone, Copy, Default)]
pub struct Runs<'a> {
    /// Under libfaketime reading this file.
    pub faketime: Option<&'a Path>,
    /// Each data directory on its own small tmpfs (root only), so a test can fill one.
    pub tmpfs: bool,
    /// Under the disk-fault shim (`holdfast_testkit::diskfault`), each node steered by
    /// its own control file.
    pub disk_faults: bool,
}

/// Starts node `id` of a cell in `dir` (its data and log there) on the given addresses
/// (port 0: any), as `runs` says.
pub fn spawn_node(dir: &Path, id: u64, raft_addr: &str, client_addr: &str, runs: Runs<'_>) -> Node {
    let mut cmd = Command::new(BIN);
    // The node reads HOLDFAST_* as config and refuses unknown keys: start it with none
    // but ours.
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("HOLDFAST_")) {
        cmd.env_remove(k);
    }
    let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join(format!("node-{id}.log"))).unwrap();
    cmd.args(["cell", "run", "--node-id", &id.to_string()])
        .arg("--data-dir")
        .arg(dir.join(format!("node-{id}")))
        .args(["--raft-addr", raft_addr, "--client-addr", client_addr])
        // These tests are about processes and clocks, not certificates.
        .arg("--insecure")
        // 2 cores, 3 processes: the timings of docs/development.md.
        .env("HOLDFAST_HEARTBEAT_MS", "100")
        .env("HOLDFAST_ELECTION_MIN_MS", "1000")
        .env("HOLDFAST_ELECTION_MAX_MS", "2000")
        .env("RUST_LOG", "warn,holdfast_cell=info")
        .stdout(Stdio::piped())
        .stderr(log);
    if runs.disk_faults {
        cmd.envs(holdfast_testkit::diskfault::env(&dir.join(format!("node-{id}")), &fault_ctl(dir, id)));
    }
    if let Some(f) = runs.faketime {
        cmd.env("LD_PRELOAD", LIBFAKETIME).env("FAKETIME_TIMESTAMP_FILE", f).env("FAKETIME_NO_CACHE", "1").env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    }
    let mut child = cmd.spawn().expect("start holdfast cell run");
    // "cell cell-1 node 1 up: raft 127.0.0.1:X client 127.0.0.1:Y"
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let words: Vec<&str> = line.split_whitespace().collect();
    let raft = words.iter().position(|w| *w == "raft").map(|i| words[i + 1].to_owned());
    let client = words.iter().position(|w| *w == "client").map(|i| words[i + 1].to_owned());
    let (Some(raft), Some(client)) = (raft, client) else { panic!("node {id} did not start: {line:?}") };
    Node { id, child, raft, client }
}

impl Drop for ProcCell {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            let _ = Command::new("kill").args(["-CONT", &n.child.id().to_string()]).status();
            let _ = n.child.kill();
            let _ = n.child.wait();
        }
        for m in &self.mounts {
            let _ = Command::new("umount").arg("-l").arg(m).status();
        }
    }
}

/// The control file of node `id`'s disk faults.
fn fault_ctl(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("node-{id}.fault"))
}

/// The small disk a node gets in [`ProcCell::start_on_tmpfs`].
pub const TMPFS_SIZE: &str = "48m";

impl ProcCell {
    /// Starts 3 node processes (under libfaketime reading `faketime_file`, if given),
    /// forms the cell with the CLI, and serves namespace `pay`, shard `default`.
    pub async fn start(faketime_file: Option<&Path>) -> ProcCell {
        Self::start_with(Runs { faketime: faketime_file, ..Runs::default() }).await
    }

    /// Like [`ProcCell::start`], each node's data directory on its own small tmpfs
    /// (root only), so that a test can fill one node's disk.
    pub async fn start_on_tmpfs() -> ProcCell {
        Self::start_with(Runs { tmpfs: true, ..Runs::default() }).await
    }

    pub async fn start_with(runs: Runs<'_>) -> ProcCell {
        let dir = tempfile::tempdir().unwrap();
        let mut mounts = Vec::new();
        if runs.tmpfs {
            for id in 1..=3u64 {
                let m = dir.path().join(format!("node-{id}"));
                std::fs::create_dir(&m).unwrap();
                let size = format!("size={TMPFS_SIZE}");
                assert!(Command::new("mount").args(["-t", "tmpfs", "-o", &size, "tmpfs"]).arg(&m).status().unwrap().success(), "mount tmpfs");
                mounts.push(m);
            }
        }
        let mut nodes = Vec::new();
        for id in 1..=3u64 {
            nodes.push(spawn_node(dir.path(), id, "127.0.0.1:0", "127.0.0.1:0", runs));
        }
        let cell = ProcCell { nodes, mounts, dir, faketime: runs.faketime.map(Path::to_path_buf), disk_faults: runs.disk_faults };
        let mut init = Command::new(BIN);
        init.args(["cell", "init", "--insecure", "--raft-endpoint", &cell.nodes[0].raft]);
        for n in &cell.nodes {
            init.args(["--member", &format!("{}={},{}", n.id, n.raft, n.client)]);
        }
        assert!(init.status().unwrap().success(), "cell init failed");
        let leader = cell.leader_client().await;
        // The tests here time TTLs: no lock-delay after an expiry (unset would be 5 s).
        cell.cli_until_ok(&leader, &["ns", "apply", "--ns", "pay", "--owner", "team-pay", "--version", "1", "--lock-delay-ms", "0"]);
        cell.cli_until_ok(&leader, &["shard", "adopt", "--ns", "pay", "--epoch", "1"]);
        cell
    }

    pub fn cli_until_ok(&self, endpoint: &str, args: &[&str]) {
        let deadline = Instant::now() + WAIT;
        loop {
            let out = Command::new(BIN).args(args).arg("--insecure").env("HOLDFAST_ENDPOINTS", endpoint).output().unwrap();
            if out.status.success() {
                return;
            }
            assert!(Instant::now() < deadline, "holdfast {args:?} kept failing: {}", String::from_utf8_lossy(&out.stderr));
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub async fn metrics(&self, n: &Node) -> Option<rpb::MetricsResponse> {
        let ch = holdfast_rpc::Transport::insecure().connect(&n.raft).await.ok()?;
        let mut admin = RaftAdminClient::new(ch);
        tokio::time::timeout(Duration::from_millis(500), admin.metrics(rpb::MetricsRequest {})).await.ok()?.ok().map(|r| r.into_inner())
    }

    /// The node that leads in the highest term, among `among` (ids), and that term.
    pub async fn leader_among(&self, among: &[u64]) -> (u64, u64) {
        let deadline = Instant::now() + WAIT;
        loop {
            let mut best = None;
            for n in self.nodes.iter().filter(|n| among.contains(&n.id)) {
                if let Some(m) = self.metrics(n).await {
                    if m.server_state == "Leader" && best.is_none_or(|(t, _)| m.current_term > t) {
                        best = Some((m.current_term, n.id));
                    }
                }
            }
            if let Some((term, id)) = best {
                return (id, term);
            }
            assert!(Instant::now() < deadline, "no leader among {among:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn leader_client(&self) -> String {
        let (id, _) = self.leader_among(&[1, 2, 3]).await;
        self.node(id).client.clone()
    }

    pub fn node(&self, id: u64) -> &Node {
        self.nodes.iter().find(|n| n.id == id).unwrap()
    }

    pub async fn client(&self, id: u64) -> LockServiceClient<Channel> {
        LockServiceClient::new(holdfast_rpc::Transport::insecure().connect(&self.node(id).client).await.unwrap())
    }

    /// SIGKILLs node `id` and, `down` later, starts it again on its data and addresses.
    pub async fn kill_and_restart_after(&mut self, id: u64, down: Duration) {
        let i = self.nodes.iter().position(|n| n.id == id).unwrap();
        let _ = self.nodes[i].child.kill();
        let _ = self.nodes[i].child.wait();
        tokio::time::sleep(down).await;
        let (raft, client) = (self.nodes[i].raft.clone(), self.nodes[i].client.clone());
        // The ports were just released; the node binds them again.
        self.nodes[i] = spawn_node(self.dir.path(), id, &raft, &client, self.runs());
    }

    /// Starts node `id` with an empty data directory, a member of nothing yet (for a
    /// membership change); returns its Raft and client addresses.
    pub fn spawn_new(&mut self, id: u64) -> (String, String) {
        assert!(self.nodes.iter().all(|n| n.id != id), "node {id} exists");
        let n = spawn_node(self.dir.path(), id, "127.0.0.1:0", "127.0.0.1:0", self.runs());
        let addrs = (n.raft.clone(), n.client.clone());
        self.nodes.push(n);
        addrs
    }

    /// SIGKILLs node `id` for good.
    pub fn kill(&mut self, id: u64) {
        let i = self.nodes.iter().position(|n| n.id == id).unwrap();
        let mut n = self.nodes.remove(i);
        let _ = n.child.kill();
        let _ = n.child.wait();
    }

    fn runs(&self) -> Runs<'_> {
        Runs { faketime: self.faketime.as_deref(), tmpfs: false, disk_faults: self.disk_faults }
    }

    /// From now on, the disk of node `id` has `fault` (the cell must run with
    /// `disk_faults`).
    pub fn disk_fault(&self, id: u64, fault: holdfast_testkit::diskfault::DiskFault) {
        assert!(self.disk_faults, "the cell was not started under the disk-fault shim");
        holdfast_testkit::diskfault::set(&fault_ctl(self.dir.path(), id), fault);
    }

    /// The faults injected into node `id` so far: (unix ms, call, path).
    pub fn disk_faults_injected(&self, id: u64) -> Vec<(u64, String, String)> {
        holdfast_testkit::diskfault::injected(&fault_ctl(self.dir.path(), id))
    }

    pub fn data_dir(&self, id: u64) -> PathBuf {
        self.dir.path().join(format!("node-{id}"))
    }

    /// The node's exit status, if it has exited.
    pub fn exited(&mut self, id: u64) -> Option<std::process::ExitStatus> {
        self.nodes.iter_mut().find(|n| n.id == id).unwrap().child.try_wait().unwrap()
    }

    pub fn signal(&self, id: u64, sig: &str) {
        assert!(Command::new("kill").args([sig, &self.node(id).child.id().to_string()]).status().unwrap().success());
    }
}

pub fn shard() -> Option<pb::ShardRef> {
    Some(pb::ShardRef { ns: "pay".into(), shard: "default".into(), epoch: 0 })
}

pub fn code(s: &tonic::Status) -> String {
    holdfast_rpc::status::code_of(s).map_or(String::new(), |c| c.as_str().to_owned())
}

pub async fn session(c: &mut LockServiceClient<Channel>, ttl_ms: u64) -> u64 {
    let deadline = Instant::now() + WAIT;
    loop {
        match c.create_session(pb::CreateSessionRequest { shard: shard(), ttl_ms, client_label: "proc-test".into() }).await {
            Ok(r) => return r.into_inner().session_id,
            Err(e) => assert!(Instant::now() < deadline, "create_session kept failing: {e:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Retries a call while the node answers UNAVAILABLE (a new leader starting its clock)
/// or NOT_LEADER (a leader just elected, before a quorum has acknowledged it within
/// its lease: docs/api.md lists both as retryable).
pub async fn until_ok<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        match f().await {
            Ok(v) => return v,
            Err(e) if ["UNAVAILABLE", "NOT_LEADER"].contains(&code(&e).as_str()) && Instant::now() < deadline => {}
            Err(e) => panic!("{what}: {e:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn acquire_req(session: u64, name: &str, rid: &str, wait_ms: u64) -> pb::AcquireRequest {
    pb::AcquireRequest {
        shard: shard(),
        name: name.into(),
        session_id: session,
        mode: pb::Mode::Exclusive as i32,
        wait_timeout_ms: wait_ms,
        request_id: rid.into(),
        value: b"proc".to_vec(),
    }
}

pub async fn renew(c: &mut LockServiceClient<Channel>, session: u64) -> Result<u64, tonic::Status> {
    let mut stream = c.keep_alive(tokio_stream::iter(vec![pb::KeepAliveRequest { session_id: session, shard: None, more: vec![] }])).await?.into_inner();
    match stream.message().await? {
        Some(r) => Ok(r.ttl_remaining_ms),
        None => Err(tonic::Status::unavailable("keepalive stream ended")),
    }
}

pub fn holders(d: &pb::DescribeResponse) -> Vec<(u64, u64)> {
    d.holders.iter().map(|h| (h.session_id, h.token)).collect()
}

/// One session's acquire/release cycles on a few names, each call recorded as an
/// operation: a definite answer, or unknown (then the same request id is sent again,
/// to whichever node answers, until it gets a definite one).
pub async fn cycles(rec: std::sync::Arc<Recorder>, clients: Vec<LockServiceClient<Channel>>, s: u64, until: Instant) -> usize {
    use holdfast_core::{CellId, LockName, NamespaceName, RegionId, SessionId};
    use holdfast_drills::history::{EventKind as K, LockKey, SessionRef};
    let session = SessionRef { cell: CellId::new("cell-1").unwrap(), id: SessionId(s) };
    let op = || rec.op();
    let mut at = 0usize;
    let mut granted = 0;
    let mut round = 0u64;
    while Instant::now() < until {
        round += 1;
        let name = ["a", "b", "c"][(round % 3) as usize];
        let lock = LockKey { ns: NamespaceName::new("pay").unwrap(), name: LockName::new(name).unwrap() };
        let rid = format!("s{s}-{round}");
        // --- acquire, the same request id until a definite answer
        let token = loop {
            let id = op();
            rec.record(K::GrantInvoked { op: id, lock: lock.clone(), session: session.clone() });
            let mut c = clients[at].clone();
            match tokio::time::timeout(Duration::from_secs(2), c.acquire(acquire_req(s, name, &rid, 0))).await {
                Ok(Ok(r)) => {
                    let token = holdfast_core::FencingToken(r.into_inner().token);
                    let (region, cell) = (RegionId::new("local").unwrap(), CellId::new("cell-1").unwrap());
                    rec.record(K::GrantOk { op: id, lock: lock.clone(), session: session.clone(), token, region, cell });
                    granted += 1;
                    break Some(token);
                }
                Ok(Err(e)) if ["LOCK_HELD", "NOT_LEADER"].contains(&code(&e).as_str()) => {
                    rec.record(K::GrantFailed { op: id, code: code(&e) });
                    if code(&e) == "LOCK_HELD" {
                        break None;
                    }
                }
                _ => rec.record(K::GrantUnknown { op: id }),
            }
            at = (at + 1) % clients.len();
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let Some(token) = token else { continue };
        // --- release it, again until a definite answer
        loop {
            let id = op();
            rec.record(K::ReleaseInvoked { op: id, lock: lock.clone(), session: session.clone(), token });
            let mut c = clients[at].clone();
            match tokio::time::timeout(
                Duration::from_secs(2),
                c.release(pb::ReleaseRequest { shard: shard(), name: name.into(), token: token.0, session_id: 0 }),
            )
            .await
            {
                Ok(Ok(_)) => {
                    rec.record(K::ReleaseOk { op: id });
                    break;
                }
                // Released by an earlier attempt whose answer was lost.
                Ok(Err(e)) if code(&e) == "NOT_HOLDER" => {
                    rec.record(K::ReleaseFailed { op: id, code: code(&e) });
                    break;
                }
                Ok(Err(e)) if code(&e) == "NOT_LEADER" => rec.record(K::ReleaseFailed { op: id, code: code(&e) }),
                _ => rec.record(K::ReleaseUnknown { op: id }),
            }
            at = (at + 1) % clients.len();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    granted
}

/// Renews each of `sessions` every `every`, through the first of `clients` that
/// answers (whichever node leads), until aborted.
pub fn keep_alive(clients: Vec<LockServiceClient<Channel>>, sessions: Vec<u64>, every: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            for s in &sessions {
                for c in &clients {
                    if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(1), renew(&mut c.clone(), *s)).await {
                        break;
                    }
                }
            }
            tokio::time::sleep(every).await;
        }
    })
}

/// Reads each of `names` through `c` (after the workload) and records its holders, so
/// the checker can tell an acknowledged grant that was lost.
pub async fn record_holders(rec: &Recorder, c: &LockServiceClient<Channel>, names: &[&str]) {
    use holdfast_drills::history::{EventKind as K, LockKey};
    for name in names {
        let since = rec.ms();
        let d = until_ok("describe", || {
            let mut c = c.clone();
            async move { c.describe(pb::DescribeRequest { shard: shard(), name: (*name).into() }).await }
        })
        .await
        .into_inner();
        let lock = LockKey { ns: holdfast_core::NamespaceName::new("pay").unwrap(), name: holdfast_core::LockName::new(*name).unwrap() };
        let holders = d.holders.iter().map(|h| holdfast_core::FencingToken(h.token)).collect();
        rec.record(K::HolderObserved { lock, since_ms: since, epoch: holdfast_core::Epoch(1), holders });
    }
}
