//! The `holdfast` binary: server roles (`holdfast cell run`, `registry run`, `gateway
//! run`), the local playground (`holdfast dev`) and operator commands against a cell
//! (`holdfast cell init`, `ns apply`, `shard adopt`, `lock ...`).
//! Commands talk gRPC; a `NOT_LEADER` answer is followed once to the hinted leader.

mod access;
mod cert;
mod client;
mod demo;
mod dev;
mod drill;
mod exec;
mod gateway_cmd;
mod logs;
mod members;
mod ops;
mod registry_cmd;
mod remote;
mod serve;
mod snapshot;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(name = "holdfast", version, about = "Distributed locks with fencing tokens, per-region Raft cells.")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    /// Log lines on stderr: text (colours only on a terminal) or json (one object per
    /// line, for a log pipeline).
    #[arg(long, global = true, value_enum, default_value = "text")]
    log_format: logs::LogFormat,
    /// Export traces over OTLP/gRPC to this collector (`http://host:4317`). Also on
    /// with the standard OTEL_EXPORTER_OTLP_ENDPOINT; OTEL_SERVICE_NAME,
    /// OTEL_TRACES_SAMPLER and the other OTEL_* variables are honoured.
    #[arg(long, global = true)]
    otlp_endpoint: Option<String>,
    /// End with the process PID (this process's parent): `holdfast dev` starts its
    /// nodes so, and they stop (SIGTERM, a graceful shutdown) however it ends, SIGKILL
    /// included. Linux only.
    #[arg(long, global = true, hide = true, value_name = "PID")]
    exit_with_parent: Option<i32>,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run or administer a cell node.
    #[command(subcommand)]
    Cell(serve::CellCmd),
    /// Run a registry node.
    #[command(subcommand)]
    Registry(registry_cmd::RegistryCmd),
    /// Run a region's gateway.
    #[command(subcommand)]
    Gateway(gateway_cmd::GatewayCmd),
    /// Certificates: the cluster's CA, node and client certificates.
    #[command(subcommand)]
    Cert(cert::CertCmd),
    /// A local multi-region playground: one process per node, until Ctrl-C.
    ///
    /// Example: holdfast dev --data-dir /tmp/hf --base-port 7000
    Dev(dev::DevArgs),
    /// Namespaces (tenants).
    #[command(subcommand)]
    Ns(client::NsCmd),
    /// Shard placement: owner, list, move (admin mode: adopt, seal, served).
    #[command(subcommand)]
    Shard(client::ShardCmd),
    /// Take, release and inspect locks.
    #[command(subcommand)]
    Lock(client::LockCmd),
    /// Sessions of a shard.
    #[command(subcommand)]
    Session(ops::SessionCmd),
    /// Regions and their state.
    #[command(subcommand)]
    Region(ops::RegionCmd),
    /// Every cell node's Raft state.
    #[command(subcommand)]
    Cluster(ops::ClusterCmd),
    /// Administrative actions, audited.
    #[command(subcommand)]
    Admin(ops::AdminCmd),
    /// Roles: who may do what in which namespace (docs/security.md).
    #[command(subcommand)]
    Role(access::RoleCmd),
    /// Bearer tokens, for callers without a client certificate.
    #[command(subcommand)]
    Token(access::TokenCmd),
    /// The durable audit log of administrative actions.
    #[command(subcommand)]
    Audit(access::AuditCmd),
    /// Drills: evacuate a region, inject faults, run a checked drill.
    #[command(subcommand)]
    Drill(drill::DrillCmd),
    /// Snapshots of the registry's or a cell's state: save, inspect, restore
    /// (docs/runbooks/disaster-recovery.md).
    #[command(subcommand)]
    Snapshot(snapshot::SnapshotCmd),
    /// Play the timeline of docs/design.md on a fresh playground: a paused holder's write is
    /// fenced off, and a shard moved to another region hands out larger tokens.
    ///
    /// Example: holdfast demo --base-port 7600
    Demo(demo::DemoArgs),
    /// One worker of `holdfast demo` (started by it).
    #[command(hide = true)]
    DemoWorker(demo::WorkerArgs),
    /// Shell completions, on stdout.
    ///
    /// Example: holdfast completion bash > /etc/bash_completion.d/holdfast
    ///          holdfast completion zsh > "${fpath[1]}/_holdfast"
    ///          holdfast completion fish > ~/.config/fish/completions/holdfast.fish
    Completion {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

fn main() -> ExitCode {
    // `lock exec`'s guard is this binary too, with no command line of its own.
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(exec::GUARD) {
        std::process::exit(exec::guard(&args[2..]));
    }
    let cli = Cli::parse();
    if let Some(parent) = cli.exit_with_parent {
        if let Err(e) = exec::end_with_parent(parent) {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    }
    // Servers log what they do; a command prints its answer and logs only trouble.
    let serving = matches!(cli.cmd, Cmd::Cell(serve::CellCmd::Run(_)) | Cmd::Registry(_) | Cmd::Gateway(_) | Cmd::Dev(_));
    // A drill provokes warnings on purpose (stale tokens, lost sessions): its report
    // says what happened.
    let drilling = matches!(cli.cmd, Cmd::Drill(_));
    let default_filter = if serving {
        "info"
    } else if drilling {
        "error"
    } else {
        "warn"
    };
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let service = match &cli.cmd {
        Cmd::Cell(_) => "holdfast-cell",
        Cmd::Registry(_) => "holdfast-registry",
        Cmd::Gateway(_) => "holdfast-gateway",
        _ => "holdfast",
    };
    // The trace exporter's channel lives on the runtime.
    let traces = {
        let _in_runtime = rt.enter();
        logs::init(cli.log_format, default_filter, cli.otlp_endpoint.as_deref(), service)
    };
    let result = rt.block_on(async {
        match cli.cmd {
            Cmd::Cell(c) => serve::run(c).await,
            Cmd::Registry(c) => registry_cmd::run(c).await,
            Cmd::Gateway(c) => gateway_cmd::run(c).await,
            Cmd::Cert(c) => cert::run(c),
            Cmd::Dev(a) => dev::run(a).await,
            Cmd::Ns(c) => client::ns(c).await,
            Cmd::Shard(c) => client::shard(c).await,
            Cmd::Lock(c) => client::lock(c).await,
            Cmd::Session(c) => ops::session(c).await,
            Cmd::Region(c) => ops::region(c).await,
            Cmd::Cluster(c) => ops::cluster(c).await,
            Cmd::Admin(c) => ops::admin(c).await,
            Cmd::Role(c) => access::role(c).await,
            Cmd::Token(c) => access::token(c).await,
            Cmd::Audit(c) => access::audit(c).await,
            Cmd::Drill(c) => drill::run(c).await,
            Cmd::Snapshot(c) => snapshot::run(c).await,
            Cmd::Demo(a) => demo::run(a).await,
            Cmd::DemoWorker(a) => demo::worker(a).await,
            Cmd::Completion { shell } => {
                use clap::CommandFactory;
                clap_complete::generate(shell, &mut Cli::command(), "holdfast", &mut std::io::stdout());
                Ok(())
            }
        }
    });
    if let Some(t) = traces {
        let _in_runtime = rt.enter();
        t.shutdown();
    }
    // Do not wait for lingering connections once the command is done.
    rt.shutdown_timeout(std::time::Duration::from_millis(200));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;
    use std::collections::BTreeSet;

    fn envs(cmd: &clap::Command, out: &mut BTreeSet<String>) {
        for a in cmd.get_arguments() {
            // Only HOLDFAST_* can be mistaken for a server setting ($USER cannot).
            if let Some(e) = a.get_env().map(|e| e.to_string_lossy().into_owned()).filter(|e| e.starts_with("HOLDFAST_")) {
                out.insert(e);
            }
        }
        for s in cmd.get_subcommands() {
            envs(s, out);
        }
    }

    /// Server loaders skip exactly the variables the command line reads: a new flag
    /// with an `env` must be added to `CLI_ONLY_ENV`, or exporting it for the CLI
    /// would break (or silently change) every server started from that shell.
    #[test]
    fn every_variable_the_cli_reads_is_skipped_by_server_loaders() {
        let mut read = BTreeSet::new();
        envs(&Cli::command(), &mut read);
        let skipped: BTreeSet<String> = holdfast_core::CLI_ONLY_ENV.iter().map(|s| s.to_string()).collect();
        assert_eq!(read, skipped, "the CLI's env vars and holdfast_core::CLI_ONLY_ENV differ");
    }

    #[test]
    fn completions_name_the_commands_in_each_shell() {
        for (shell, marker) in [
            (clap_complete::Shell::Bash, "_holdfast()"),
            (clap_complete::Shell::Zsh, "#compdef holdfast"),
            (clap_complete::Shell::Fish, "complete -c holdfast"),
        ] {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "holdfast", &mut out);
            let text = String::from_utf8(out).unwrap();
            assert!(text.contains(marker), "{shell}: no {marker:?}");
            for word in ["evacuate", "acquire", "--endpoints", "completion"] {
                assert!(text.contains(word), "{shell} completion lacks {word}");
            }
        }
    }
}
