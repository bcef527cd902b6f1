//! `holdfast dev`: a local multi-region deployment on loopback, one OS process per
//! node — a registry voter per region, a 3-node cell per region, a gateway per region —
//! supervised until Ctrl-C or SIGTERM; SIGHUP restarts the processes that exited. With
//! `--netns` each region lives in its own network namespace. See docs/playground.md.
//!
//! What lives where: [`layout`] derives names, ids, ports, addresses and directories;
//! [`netns`] builds and removes the namespaces and the bridge; [`supervisor`] runs,
//! restarts and stops the processes; [`bootstrap`] forms the groups, writes the
//! registry's records on a first start and waits for readiness.

mod bootstrap;
pub mod certs;
pub mod endpoints;
mod layout;
mod netns;
mod supervisor;

use bootstrap::{DEMO_NS, DEMO_SHARD};
use clap::Args;
use endpoints::Endpoints;
use layout::{Layout, NodeSpec, Settings};
use std::path::{Path, PathBuf};
use std::time::Duration;
use supervisor::{Supervisor, Tier};
use tokio::signal::unix::{signal, SignalKind};
use tracing::{info, warn};

/// Per tier (gateways, cells, registry, one after the other): a node's own clean stop
/// takes at most its 5 s shutdown deadline.
const STOP_DEADLINE: Duration = Duration::from_secs(8);
const SETTINGS_VERSION: u32 = 1;

#[derive(Debug, Args)]
pub struct DevArgs {
    /// Where RocksDB, logs and endpoints.json live. Default: a fresh directory under
    /// the system temp dir (printed). Start again on the same directory to get the
    /// same deployment back, locks and ownership included.
    #[arg(long, env = "HOLDFAST_PLAYGROUND")]
    data_dir: Option<PathBuf>,
    /// First port of the fixed port range (20 ports per region). Default 7000, or what
    /// the data directory was created with.
    #[arg(long)]
    base_port: Option<u16>,
    /// Number of regions (east, west, south, north, central). Default 3, or what the
    /// data directory was created with.
    #[arg(long)]
    regions: Option<usize>,
    /// Start, take a lock through a gateway, print its token, stop everything, exit.
    #[arg(long)]
    once: bool,
    /// Put each region in its own Linux network namespace, on a bridge, so a region can
    /// be cut off (`bridge link set dev <host_veth> state 0`). Needs root and `ip`. A data
    /// directory created with it keeps it.
    #[arg(long)]
    netns: bool,
    /// Plaintext and no authentication on every port, instead of mutual TLS with the
    /// certificates the playground makes under `<data-dir>/certs`. A data directory
    /// created with it keeps it.
    #[arg(long)]
    insecure: bool,
    /// Start every cell node with a planted bug (`token-reuse`), for proving a drill's
    /// checker; debug builds only. Not remembered in dev.json.
    #[arg(long, hide = true)]
    unsafe_plant: Option<String>,
    /// The registry's ownership lease, ms: how long a cell cut off from the registry
    /// serves its shards, and how long an unconfirmed `shard move --unplanned` or
    /// `region failover` waits (docs/registry.md). Default the production 35 minutes;
    /// shorter for a drill or a benchmark of failover. Not remembered in dev.json.
    #[arg(long)]
    ownership_lease_ms: Option<u64>,
}

pub async fn run(a: DevArgs) -> Result<(), String> {
    // Installed first: a SIGTERM during start-up must stop the children too.
    let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    // Also installed first: SIGHUP's default would end the supervisor.
    let mut hup = signal(SignalKind::hangup()).map_err(|e| e.to_string())?;

    if a.netns {
        netns::preflight()?;
    }
    let data_dir = match a.data_dir {
        Some(d) => d,
        None => {
            // Refuse bad flags before leaving a directory behind.
            defaults(a.base_port, a.regions, a.netns, a.insecure).validate()?;
            fresh_dir()?
        }
    };
    std::fs::create_dir_all(&data_dir).map_err(|e| format!("{}: {e}", data_dir.display()))?;
    let data_dir = data_dir.canonicalize().map_err(|e| format!("{}: {e}", data_dir.display()))?;
    let settings = settings(&data_dir, a.base_port, a.regions, a.netns, a.insecure)?;
    if settings.netns && !a.netns {
        netns::preflight()?;
    }
    let layout = Layout::new(&data_dir, settings)?;
    if !layout.insecure {
        certs::ensure(&layout)?;
    }
    // Stale pids are dangerous to a drill (a pid may be reused): endpoints.json exists
    // only while this deployment is up and ready.
    let _ = std::fs::remove_file(layout.endpoints_file());
    settings.write(&data_dir)?;
    println!("holdfast dev: {} regions, data in {}", layout.regions.len(), data_dir.display());

    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let mut sup = Supervisor::new(exe, &layout.logs_dir())?;
    if let Some(n) = &layout.netns {
        netns::setup(n).await?;
        println!("network namespaces: bridge {} ({}/{}), one namespace per region", n.bridge, n.bridge_ip, layout::NETNS_PREFIX);
    }
    // `None`: a signal came first; stopping then is what was asked for.
    let extra = Extra { plant: a.unsafe_plant.as_deref(), ownership_lease_ms: a.ownership_lease_ms };
    let started = tokio::select! {
        r = start(&mut sup, &layout, settings, &extra) => Some(r),
        _ = term.recv() => None,
        _ = int.recv() => None,
    };
    let outcome = match started {
        None => Ok(()),
        Some(Err(e)) => Err(e),
        Some(Ok(())) if a.once => tokio::select! {
            r = once(&sup, &layout) => r,
            _ = term.recv() => Ok(()),
            _ = int.recv() => Ok(()),
        },
        Some(Ok(())) => {
            println!("Ctrl-C (or SIGTERM) stops everything; SIGHUP (pid {}) restarts what exited.", std::process::id());
            loop {
                tokio::select! {
                    _ = term.recv() => break,
                    _ = int.recv() => break,
                    _ = hup.recv() => {
                        let done = tokio::select! {
                            r = restart_exited(&mut sup, &layout) => Some(r),
                            _ = term.recv() => None,
                            _ = int.recv() => None,
                        };
                        match done {
                            None => break,
                            Some(Ok(names)) => info!(restarted = ?names, "SIGHUP: restart done"),
                            Some(Err(e)) => warn!(error = %e, "SIGHUP: restart incomplete"),
                        }
                    }
                    e = sup.next_exit() => {
                        // A drill may have killed it on purpose: SIGHUP brings it back.
                        warn!(name = %e.name, status = %e.status, "process exited; not restarted (SIGHUP restarts it)");
                    }
                }
            }
            Ok(())
        }
    };
    println!("stopping {} processes", sup.procs().len());
    let killed = sup.stop_all(STOP_DEADLINE).await;
    let _ = std::fs::remove_file(layout.endpoints_file());
    if let Some(n) = &layout.netns {
        // Every process is gone (stopped or SIGKILLed and reaped): nothing uses them.
        netns::teardown(n).await;
    }
    if !killed.is_empty() {
        eprintln!("holdfast dev: killed after the deadline: {}", killed.join(", "));
    }
    println!("stopped; data kept in {}", data_dir.display());
    outcome
}

fn fresh_dir() -> Result<PathBuf, String> {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let d = std::env::temp_dir().join(format!("holdfast-dev-{secs}-{}", std::process::id()));
    std::fs::create_dir(&d).map_err(|e| format!("{}: {e}", d.display()))?;
    Ok(d)
}

/// The settings a data directory was created with; flags that contradict them are an
/// error (Raft members are known by their addresses).
/// `--netns` given to a directory created without it is refused; a directory created
/// with it keeps it whether or not the flag is repeated (its members' addresses are the
/// namespaces' addresses).
fn settings(data_dir: &Path, base_port: Option<u16>, regions: Option<usize>, netns: bool, insecure: bool) -> Result<Settings, String> {
    match Settings::read(data_dir)? {
        Some(s) => {
            if base_port.is_some_and(|p| p != s.base_port) || regions.is_some_and(|r| r != s.regions) || (netns && !s.netns) || (insecure && !s.insecure) {
                return Err(format!(
                    "{} was created with --base-port {} --regions {}{}{}: start it with those (or use a new --data-dir)",
                    data_dir.display(),
                    s.base_port,
                    s.regions,
                    if s.netns { " --netns" } else { " (without --netns)" },
                    if s.insecure { " --insecure" } else { " (with TLS)" },
                ));
            }
            Ok(s)
        }
        None => Ok(defaults(base_port, regions, netns, insecure)),
    }
}

fn defaults(base_port: Option<u16>, regions: Option<usize>, netns: bool, insecure: bool) -> Settings {
    Settings { version: SETTINGS_VERSION, base_port: base_port.unwrap_or(7000), regions: regions.unwrap_or(3), initialized: false, netns, insecure }
}

/// The network namespace a region's processes run in (`--netns`).
fn netns_of<'a>(layout: &'a Layout, region: &str) -> Option<&'a str> {
    layout.netns.as_ref().and_then(|n| n.region(region)).map(|r| r.netns.as_str())
}

/// Flags of one start, not remembered in dev.json.
struct Extra<'a> {
    plant: Option<&'a str>,
    ownership_lease_ms: Option<u64>,
}

async fn start(sup: &mut Supervisor, layout: &Layout, mut settings: Settings, extra: &Extra<'_>) -> Result<(), String> {
    let all_registry = layout.registry_endpoints(None);
    for r in &layout.regions {
        let n = &r.registry;
        let mut args = strings(&["registry", "run", "--region", &r.name]);
        if let Some(ms) = extra.ownership_lease_ms {
            args.extend(strings(&["--ownership-lease-ms", &ms.to_string()]));
        }
        args.extend(node_args(n));
        args.extend(layout.tls_args(&n.name));
        sup.spawn(&n.name, Tier::Registry, args, netns_of(layout, &r.name))?;
    }
    for r in &layout.regions {
        for n in &r.cell.nodes {
            let mut args = strings(&["cell", "run", "--cell", &r.cell.name, "--region", &r.name, "--registry", &all_registry]);
            args.extend(node_args(n));
            args.extend(layout.tls_args(&n.name));
            if let Some(p) = extra.plant {
                args.extend(strings(&["--unsafe-plant", p]));
            }
            sup.spawn(&n.name, Tier::Cell, args, netns_of(layout, &r.name))?;
        }
    }
    for r in &layout.regions {
        let g = &r.gateway;
        let mut args = strings(&[
            "gateway",
            "run",
            "--region",
            &r.name,
            "--registry",
            &layout.registry_endpoints(Some(&r.name)),
            "--grpc-addr",
            &g.grpc,
            "--http-addr",
            &g.http,
        ]);
        args.extend(layout.tls_args(&g.name));
        sup.spawn(&g.name, Tier::Gateway, args, netns_of(layout, &r.name))?;
    }

    println!("{}", if settings.initialized { "restarting an existing deployment" } else { "forming a new deployment" });
    let voters: Vec<&NodeSpec> = layout.registry_nodes().collect();
    let t = layout.transport()?;
    bootstrap::form_group(sup, t, "the registry", &voters).await?;
    for r in &layout.regions {
        let nodes: Vec<&NodeSpec> = r.cell.nodes.iter().collect();
        bootstrap::form_group(sup, t, &format!("cell {}", r.cell.name), &nodes).await?;
    }
    if !settings.initialized {
        bootstrap::records(sup, layout).await?;
        settings.initialized = true;
        settings.write(&layout.data_dir)?;
    }
    bootstrap::gateways_ready(sup, layout).await?;
    bootstrap::demo_shard_served(sup, layout).await?;
    write_endpoints(sup, layout)?;
    print_table(sup, layout);
    println!("endpoints: {}", layout.endpoints_file().display());
    println!("demo namespace `{DEMO_NS}`, shard `{DEMO_SHARD}` on {}; try:", layout.regions[0].cell.name);
    let http = &layout.regions[0].gateway.http;
    let curl = if layout.insecure {
        format!("curl -s http://{http}")
    } else {
        let c = certs::dir(&layout.data_dir);
        format!("curl -s --cacert {0}/ca.crt --cert {0}/client.root.crt --key {0}/client.root.key https://{http}", c.display())
    };
    println!("  {curl}/v1/sessions -d '{{\"ns\":\"{DEMO_NS}\",\"ttl_ms\":30000}}' -H 'content-type: application/json'");
    if !layout.insecure {
        println!("  export HOLDFAST_PLAYGROUND={}   # the command line finds root's certificate there", layout.data_dir.display());
    }
    info!("playground ready");
    Ok(())
}

fn strings(s: &[&str]) -> Vec<String> {
    s.iter().map(|s| (*s).to_owned()).collect()
}

fn node_args(n: &NodeSpec) -> Vec<String> {
    let mut a = strings(&["--node-id", &n.node_id.to_string(), "--raft-addr", &n.raft, "--client-addr", &n.client]);
    a.push("--data-dir".into());
    a.push(n.data_dir.display().to_string());
    if let Some(m) = &n.metrics {
        a.extend(strings(&["--metrics-addr", m]));
    }
    a
}

fn write_endpoints(sup: &Supervisor, layout: &Layout) -> Result<(), String> {
    let demo = endpoints::Demo { ns: DEMO_NS.into(), shard: DEMO_SHARD.into(), cell: layout.regions[0].cell.name.clone() };
    Endpoints::of(sup, layout, demo).write(&layout.data_dir)
}

/// SIGHUP: starts every process that has exited again (same command line, log file and
/// network namespace), waits until each is up — a node's RaftAdmin answers, a
/// gateway's /readyz says 200 — and rewrites endpoints.json with the new pids (also
/// when one does not come up: then its pid there is of a dead process, and the error
/// says why). Returns the names restarted.
async fn restart_exited(sup: &mut Supervisor, layout: &Layout) -> Result<Vec<String>, String> {
    let names = sup.exited_names().await;
    if names.is_empty() {
        info!("SIGHUP: every process is running");
        return Ok(names);
    }
    for name in &names {
        let pid = sup.respawn(name)?;
        info!(name, pid, "restarted");
    }
    let mut errors = Vec::new();
    for name in &names {
        if let Err(e) = wait_up(sup, layout, name).await {
            errors.push(e);
        }
    }
    write_endpoints(sup, layout)?;
    if errors.is_empty() {
        Ok(names)
    } else {
        Err(errors.join("; "))
    }
}

/// Until `name` answers: a node's RaftAdmin Metrics, a gateway's /readyz.
async fn wait_up(sup: &Supervisor, layout: &Layout, name: &str) -> Result<(), String> {
    for r in &layout.regions {
        if r.gateway.name == name {
            let http = &r.gateway.http;
            return bootstrap::until(sup, name, &format!("{name} /readyz"), || async {
                match bootstrap::http_status(layout.transport()?, http, "/readyz").await? {
                    200 => Ok(()),
                    other => Err(format!("HTTP {other}")),
                }
            })
            .await;
        }
        if let Some(n) = std::iter::once(&r.registry).chain(&r.cell.nodes).find(|n| n.name == name) {
            return bootstrap::until(sup, name, &format!("{name} to answer RaftAdmin on {}", n.raft), || async {
                crate::remote::raft_metrics(layout.transport()?, &n.raft).await.map(|_| ())
            })
            .await;
        }
    }
    Err(format!("no process {name} in the layout"))
}

fn print_table(sup: &Supervisor, layout: &Layout) {
    let pid = |name: &str| sup.pid(name).map(|p| p.to_string()).unwrap_or_default();
    println!("{:<9} {:<14} {:<8} {:<4} {:<21} {:<21} {:<21} PID", "ROLE", "NAME", "REGION", "ID", "CLIENT/GRPC", "RAFT", "HTTP");
    for r in &layout.regions {
        let g = &r.gateway;
        println!("{:<9} {:<14} {:<8} {:<4} {:<21} {:<21} {:<21} {}", "gateway", g.name, r.name, "-", g.grpc, "-", g.http, pid(&g.name));
        let n = &r.registry;
        let m = n.metrics.as_deref().unwrap_or("-");
        println!("{:<9} {:<14} {:<8} {:<4} {:<21} {:<21} {:<21} {}", "registry", n.name, r.name, n.node_id, n.client, n.raft, m, pid(&n.name));
        for n in &r.cell.nodes {
            let m = n.metrics.as_deref().unwrap_or("-");
            println!("{:<9} {:<14} {:<8} {:<4} {:<21} {:<21} {:<21} {}", "cell", n.name, r.name, n.node_id, n.client, n.raft, m, pid(&n.name));
        }
    }
}

/// `--once`: a lock through the first gateway, and every group's leader.
async fn once(sup: &Supervisor, layout: &Layout) -> Result<(), String> {
    let token = bootstrap::take_demo_lock(sup, layout).await?;
    println!("lock {DEMO_NS}/{DEMO_SHARD}/dev-once taken through {}: token {token}", layout.regions[0].gateway.name);
    for r in &layout.regions {
        let m = crate::remote::raft_metrics(layout.transport()?, &r.cell.nodes[0].raft).await?;
        println!("cell {}: leader node {} term {}", r.cell.name, m.leader_id, m.current_term);
    }
    Ok(())
}
