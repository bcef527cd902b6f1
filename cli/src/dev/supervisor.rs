//! One OS process per node: spawn with output to `<data-dir>/logs/<name>.log`, notice
//! when one exits, and stop them all — SIGTERM by tier (gateways, cells, registry), then
//! SIGKILL whatever outlives the deadline.
//!
//! A process that exits is not restarted on its own; [`Supervisor::respawn`] starts it
//! again with the same command line, log file and network namespace when asked (SIGHUP
//! to `holdfast dev`).
//!
//! With `--netns` a region's processes run as `ip netns exec <netns> <exe> <args>`:
//! `ip` enters the namespace and execs, so the pid we get is the node's own.
//!
//! Children get their own process group, so a Ctrl-C in the terminal reaches only the
//! supervisor, which then stops them in order (a second SIGINT would make a node exit
//! without its clean shutdown).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, warn};

/// Stop order: front doors first, the registry last (cells report to it until the end).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tier {
    Gateway,
    Cell,
    Registry,
}

#[derive(Debug)]
pub struct Proc {
    pub name: String,
    pub tier: Tier,
    pub pid: u32,
    pub log: PathBuf,
    /// The whole command line: `[ip netns exec <netns>] <exe> <args>`.
    pub argv: Vec<String>,
    pub netns: Option<String>,
    args: Vec<String>,
}

#[derive(Debug)]
pub struct Exit {
    pub name: String,
    pub status: String,
}

/// `None` while the process runs; its exit status once reaped.
type States = Arc<Mutex<BTreeMap<String, Option<String>>>>;

#[derive(Debug)]
pub struct Supervisor {
    exe: PathBuf,
    logs: PathBuf,
    procs: Vec<Proc>,
    states: States,
    exits_tx: mpsc::UnboundedSender<Exit>,
    exits: mpsc::UnboundedReceiver<Exit>,
}

impl Supervisor {
    pub fn new(exe: PathBuf, logs: &Path) -> Result<Supervisor, String> {
        std::fs::create_dir_all(logs).map_err(|e| format!("{}: {e}", logs.display()))?;
        let (exits_tx, exits) = mpsc::unbounded_channel();
        Ok(Supervisor { exe, logs: logs.to_owned(), procs: Vec::new(), states: States::default(), exits_tx, exits })
    }

    pub fn procs(&self) -> &[Proc] {
        &self.procs
    }

    pub fn pid(&self, name: &str) -> Option<u32> {
        self.procs.iter().find(|p| p.name == name).map(|p| p.pid)
    }

    /// Starts `<exe> <args>` as `name` (inside network namespace `netns` if given),
    /// appending its output to its log file.
    pub fn spawn(&mut self, name: &str, tier: Tier, args: Vec<String>, netns: Option<&str>) -> Result<u32, String> {
        let log = self.logs.join(format!("{name}.log"));
        let mut argv = match netns {
            Some(ns) => vec!["ip".to_owned(), "netns".into(), "exec".into(), ns.to_owned()],
            None => Vec::new(),
        };
        argv.push(self.exe.display().to_string());
        argv.extend(args.iter().cloned());
        argv.extend(crate::logs::child_args());
        // The node ends with us, SIGKILL included (`holdfast --exit-with-parent`): no
        // orphan keeps its ports for the next `holdfast dev`.
        argv.extend(["--exit-with-parent".to_owned(), std::process::id().to_string()]);
        let pid = self.start(name, &argv, &log)?;
        let p = Proc { name: name.to_owned(), tier, pid, log, argv, netns: netns.map(str::to_owned), args };
        match self.procs.iter_mut().find(|p| p.name == name) {
            Some(old) => *old = p,
            None => self.procs.push(p),
        }
        Ok(pid)
    }

    /// Starts `name` again as it was started before (same command line, log file and
    /// network namespace). Returns its new pid.
    pub fn respawn(&mut self, name: &str) -> Result<u32, String> {
        let p = self.procs.iter().find(|p| p.name == name).ok_or_else(|| format!("no process {name}"))?;
        let (tier, args, netns) = (p.tier, p.args.clone(), p.netns.clone());
        self.spawn(name, tier, args, netns.as_deref())
    }

    /// The names of the processes that have exited, in start order. A process that is
    /// dead but not yet reaped (a `kill -9` just before the SIGHUP) counts: its exit is
    /// waited for, up to 2 s.
    pub async fn exited_names(&self) -> Vec<String> {
        let end = Instant::now() + Duration::from_secs(2);
        while self.procs.iter().any(|p| self.running(&p.name) && !alive(p.pid)) && Instant::now() < end {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.procs.iter().filter(|p| self.exited(&p.name).is_some()).map(|p| p.name.clone()).collect()
    }

    fn start(&mut self, name: &str, argv: &[String], log: &Path) -> Result<u32, String> {
        let open = || std::fs::OpenOptions::new().create(true).append(true).open(log).map_err(|e| format!("{}: {e}", log.display()));
        let mut cmd = tokio::process::Command::new(&argv[0]);
        cmd.args(&argv[1..]).stdin(Stdio::null()).stdout(open()?).stderr(open()?).process_group(0).kill_on_drop(true);
        // A user's HOLDFAST_* settings are for the CLI; every child is configured by its
        // flags alone (and a stray key would fail their strict configs).
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("HOLDFAST_") {
                cmd.env_remove(k);
            }
        }
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "info");
        }
        let mut child = cmd.spawn().map_err(|e| format!("cannot start {name}: {e}"))?;
        let pid = child.id().ok_or_else(|| format!("{name} exited at once"))?;
        debug!(name, pid, log = %log.display(), "started");
        self.states.lock().expect("states").insert(name.to_owned(), None);
        let (states, tx, owned) = (self.states.clone(), self.exits_tx.clone(), name.to_owned());
        tokio::spawn(async move {
            let status = match child.wait().await {
                Ok(s) => describe(s),
                Err(e) => format!("lost: {e}"),
            };
            states.lock().expect("states").insert(owned.clone(), Some(status.clone()));
            let _ = tx.send(Exit { name: owned, status });
        });
        Ok(pid)
    }

    /// How `name` ended, if it has.
    pub fn exited(&self, name: &str) -> Option<String> {
        self.states.lock().expect("states").get(name).cloned().flatten()
    }

    fn running(&self, name: &str) -> bool {
        matches!(self.states.lock().expect("states").get(name), Some(None))
    }

    /// The next child that exits (while running, every exit is unexpected).
    pub async fn next_exit(&mut self) -> Exit {
        self.exits.recv().await.expect("the supervisor holds a sender")
    }

    /// SIGCONT and SIGTERM tier by tier, waiting up to `per_tier` for each; SIGKILL
    /// whatever is left. Returns the names that had to be killed.
    pub async fn stop_all(&mut self, per_tier: Duration) -> Vec<String> {
        let mut left = Vec::new();
        for tier in [Tier::Gateway, Tier::Cell, Tier::Registry] {
            let names: Vec<(String, u32)> = self.procs.iter().filter(|p| p.tier == tier && self.running(&p.name)).map(|p| (p.name.clone(), p.pid)).collect();
            for (name, pid) in &names {
                debug!(name, pid, "stopping (SIGTERM)");
                // A drill may have left it SIGSTOPped: a stopped process never sees TERM.
                signal(*pid, "CONT").await;
                signal(*pid, "TERM").await;
            }
            self.wait_gone(names.iter().map(|(n, _)| n.as_str()), Instant::now() + per_tier).await;
            // One stuck tier must not eat the next one's time: kill it now.
            for (name, pid) in names.into_iter().filter(|(n, _)| self.running(n)) {
                warn!(name, pid, "did not stop by the deadline; SIGKILL");
                signal(pid, "KILL").await;
                left.push((name, pid));
            }
        }
        self.wait_gone(left.iter().map(|(n, _)| n.as_str()), Instant::now() + Duration::from_secs(5)).await;
        left.into_iter().map(|(n, _)| n).collect()
    }

    async fn wait_gone<'a>(&mut self, names: impl Iterator<Item = &'a str>, end: Instant) {
        let names: Vec<&str> = names.collect();
        while names.iter().any(|n| self.running(n)) {
            match tokio::time::timeout_at(end, self.exits.recv()).await {
                Ok(Some(e)) => debug!(name = %e.name, status = %e.status, "stopped"),
                Ok(None) | Err(_) => return,
            }
        }
    }
}

/// Neither gone nor a zombie.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit_once(')').is_some_and(|(_, rest)| !matches!(rest.trim_start().chars().next(), Some('Z' | 'X'))))
}

fn describe(s: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => s.to_string(),
    }
}

/// Sends a signal with kill(1): the workspace forbids `unsafe`, and one process per
/// signal at shutdown costs nothing.
async fn signal(pid: u32, sig: &str) {
    let r = tokio::process::Command::new("kill").arg(format!("-{sig}")).arg(pid.to_string()).stderr(Stdio::null()).status().await;
    if let Err(e) = r {
        warn!(pid, sig, error = %e, "cannot run kill");
    }
}
