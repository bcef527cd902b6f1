//! `holdfast gateway run`: one region's stateless front door.

use crate::serve::{overrides, until_signal};
use clap::{Args, Subcommand};
use holdfast_gateway::{GatewayConfig, GatewayServer};
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub enum GatewayCmd {
    /// Run a gateway until SIGINT or SIGTERM.
    ///
    /// Example: holdfast gateway run --region east --registry 127.0.0.1:7200,127.0.0.1:7210 \
    ///            --grpc-addr 127.0.0.1:7400 --http-addr 127.0.0.1:7480
    Run(RunArgs),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// TOML file with the gateway's settings (fields of `GatewayConfig`); flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// The region this gateway fronts.
    #[arg(long)]
    region: Option<String>,
    /// Registry client addresses, comma-separated.
    #[arg(long)]
    registry: Option<String>,
    /// gRPC listen address (LockService, RegistryService, health, reflection).
    #[arg(long)]
    grpc_addr: Option<String>,
    /// HTTP listen address (JSON API, /metrics, /healthz, /readyz).
    #[arg(long)]
    http_addr: Option<String>,
    /// Print the configuration this gateway would run with (defaults, file,
    /// `HOLDFAST_*` environment, flags), as JSON, and exit.
    #[arg(long)]
    print_config: bool,
    #[command(flatten)]
    tls: crate::serve::ServerTls,
}

pub async fn run(cmd: GatewayCmd) -> Result<(), String> {
    match cmd {
        GatewayCmd::Run(a) => run_gateway(a).await,
    }
}

async fn run_gateway(a: RunArgs) -> Result<(), String> {
    let own = [("region", a.region), ("registry_endpoints", a.registry), ("grpc_addr", a.grpc_addr), ("http_addr", a.http_addr)];
    let overrides = overrides(own.into_iter().chain(a.tls.overrides()));
    let cfg = GatewayConfig::load(a.config.as_deref(), &overrides).map_err(|e| e.to_string())?;
    if a.print_config {
        return crate::serve::print_config(&cfg);
    }
    let server = GatewayServer::bind(&cfg).await.map_err(|e| format!("cannot start the gateway: {e}"))?;
    println!("gateway {} up: grpc {} http {}", cfg.region, server.grpc_addr(), server.http_addr());
    until_signal(server.shutdown()).await;
    Ok(())
}
