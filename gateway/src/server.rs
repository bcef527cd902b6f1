//! `GatewayServer`: the gRPC port (LockService, RegistryService, gRPC health, reflection
//! v1 and v1alpha) and the HTTP port (the JSON API plus /metrics, /healthz, /readyz),
//! the placement follower, and a shutdown with a deadline. Both ports are served by the
//! wire edge (`holdfast_rpc::Transport`); every task runs under one [`Tasks`].

use crate::access::Access;
use crate::config::GatewayConfig;
use crate::gateway::Gateway;
use crate::grpc::{LockFront, RegistryFront};
use crate::placement::Placement;
use holdfast_proto::lock::v1::lock_service_server::LockServiceServer;
use holdfast_proto::registry::v1::registry_service_server::RegistryServiceServer;
use holdfast_rpc::net::Listener;
use holdfast_rpc::{bounded, Budget, Tasks, Transport};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tracing::{info, warn};

#[derive(Debug)]
pub struct GatewayServer {
    grpc_addr: SocketAddr,
    http_addr: SocketAddr,
    tasks: Tasks,
    deadline: Duration,
}

impl GatewayServer {
    pub async fn bind(cfg: &GatewayConfig) -> std::io::Result<GatewayServer> {
        let grpc = TcpListener::bind(&cfg.grpc_addr).await?;
        let http = TcpListener::bind(&cfg.http_addr).await?;
        Self::start(cfg, grpc, http).await
    }

    /// Starts on listeners the caller bound (tests bind port 0).
    pub async fn start(cfg: &GatewayConfig, grpc: TcpListener, http: TcpListener) -> std::io::Result<GatewayServer> {
        let transport = Transport::new(cfg.transport.clone(), cfg.tls.security().map_err(std::io::Error::other)?);
        Self::start_on(cfg, grpc.into(), http.into(), transport)
    }

    /// Starts a gateway of the deterministic simulation (docs/simulation.md): its
    /// listeners and `transport` are of the simulated network. Everything else is
    /// what [`GatewayServer::start`] starts.
    pub async fn start_simulated(cfg: &GatewayConfig, grpc: Listener, http: Listener, transport: Transport) -> std::io::Result<GatewayServer> {
        Self::start_on(cfg, grpc, http, transport)
    }

    fn start_on(cfg: &GatewayConfig, grpc: Listener, http: Listener, transport: Transport) -> std::io::Result<GatewayServer> {
        holdfast_telemetry::install();
        let grpc_addr = grpc.local_addr()?;
        let http_addr = http.local_addr()?;
        let tasks = Tasks::new();
        let placement = Placement::new(&transport, cfg.registry());
        let access = Arc::new(Access::new(transport.security().is_tls()));
        let gw = Gateway::new(placement.clone(), access.clone(), tasks.clone(), transport.options().request_timeout());
        placement.follow(&tasks);
        {
            let (placement, access, budget) = (placement.clone(), access.clone(), Budget::per_attempt(transport.options().request_timeout()));
            tasks.spawn("access policy follower", async move { access.follow(placement.registry(), budget).await });
        }
        tasks.spawn("metrics upkeep", holdfast_telemetry::upkeep());

        let (health, health_svc) = tonic_health::server::health_reporter();
        let reflection_v1 = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(holdfast_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .build_v1()
            .map_err(std::io::Error::other)?;
        let reflection_v1alpha = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(holdfast_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .build_v1alpha()
            .map_err(std::io::Error::other)?;
        // Serving once placement is listed and the access policy fetched: health
        // follows readiness.
        let is_ready = {
            let (placement, access) = (placement.clone(), access.clone());
            move || placement.ready() && access.ready()
        };
        {
            let is_ready = is_ready.clone();
            tasks.spawn("health reporter", async move {
                loop {
                    if is_ready() {
                        health.set_serving::<LockServiceServer<LockFront>>().await;
                        health.set_service_status("", tonic_health::ServingStatus::Serving).await;
                    } else {
                        health.set_not_serving::<LockServiceServer<LockFront>>().await;
                        health.set_service_status("", tonic_health::ServingStatus::NotServing).await;
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            });
        }
        let router = transport
            .grpc_front_door(crate::door::grpc_observer())
            .add_service(health_svc)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(bounded!(LockServiceServer::new(LockFront(gw.clone())), transport))
            .add_service(bounded!(RegistryServiceServer::new(RegistryFront(gw.clone())), transport));
        {
            let (transport, stop) = (transport.clone(), tasks.stop_token());
            tasks.spawn_graceful("gRPC port", async move {
                if let Err(e) = transport.serve_grpc(router, grpc, stop.cancelled_owned()).await {
                    warn!(error = %e, "gateway gRPC server ended with an error");
                }
            });
        }

        let ready: holdfast_telemetry::Readiness = Arc::new(is_ready);
        let status = axum::Router::new()
            .route("/status", axum::routing::get(crate::status::page))
            .with_state(crate::status::StatusPage::new(gw.clone(), cfg.region.clone()));
        let app = crate::http::router(gw).merge(holdfast_telemetry::router(ready)).merge(status);
        {
            let stop = tasks.stop_token();
            tasks.spawn_graceful("HTTP port", async move {
                if let Err(e) = transport.serve_http(app, http, stop.cancelled_owned()).await {
                    warn!(error = %e, "gateway HTTP server ended with an error");
                }
            });
        }
        info!(region = %cfg.region, grpc = %grpc_addr, http = %http_addr, "gateway started");
        Ok(GatewayServer { grpc_addr, http_addr, tasks, deadline: Duration::from_millis(cfg.shutdown_deadline_ms) })
    }

    pub fn grpc_addr(&self) -> SocketAddr {
        self.grpc_addr
    }

    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }

    /// Stops both ports and the placement follower, within the deadline.
    pub async fn shutdown(self) {
        let left = self.tasks.shutdown(self.deadline).await;
        if !left.is_empty() {
            warn!(tasks = ?left, "gateway shutdown passed its deadline; stopped what was left");
        }
    }
}
