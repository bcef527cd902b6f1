//! `GatewayServer`: the gRPC port (LockService, RegistryService, gRPC health, reflection
//! v1 and v1alpha) and the HTTP port (the JSON API plus /metrics, /healthz, /readyz),
//! the placement follower, and a shutdown with a deadline.

use crate::config::GatewayConfig;
use crate::gateway::Gateway;
use crate::grpc::{LockFront, RegistryFront};
use crate::placement::Placement;
use holdfast_client::upstream::Upstream;
use holdfast_proto::lock::v1::lock_service_server::LockServiceServer;
use holdfast_proto::registry::v1::registry_service_server::RegistryServiceServer;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::transport::server::TcpIncoming;
use tracing::{info, warn};

#[derive(Debug)]
pub struct GatewayServer {
    grpc_addr: SocketAddr,
    http_addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    /// Runs until aborted.
    upkeep: JoinHandle<()>,
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
        holdfast_telemetry::install();
        let grpc_addr = grpc.local_addr()?;
        let http_addr = http.local_addr()?;
        let placement = Placement::new(Arc::new(Upstream::new(cfg.registry())));
        let gw = Gateway::new(placement.clone());
        let (shutdown, rx) = watch::channel(false);
        let mut tasks = Vec::new();

        tasks.push(tokio::spawn(placement.clone().follow(rx.clone())));
        let upkeep = tokio::spawn(holdfast_telemetry::upkeep());

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
        // Serving once placement is listed: health follows readiness.
        {
            let placement = placement.clone();
            let mut stop = rx.clone();
            tasks.push(tokio::spawn(async move {
                loop {
                    if placement.ready() {
                        health.set_serving::<LockServiceServer<LockFront>>().await;
                        health.set_service_status("", tonic_health::ServingStatus::Serving).await;
                    } else {
                        health.set_not_serving::<LockServiceServer<LockFront>>().await;
                        health.set_service_status("", tonic_health::ServingStatus::NotServing).await;
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                        _ = stop.wait_for(|s| *s) => return,
                    }
                }
            }));
        }
        let mut stop = rx.clone();
        let grpc_server = tonic::transport::Server::builder()
            .add_service(health_svc)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(LockServiceServer::new(LockFront(gw.clone())))
            .add_service(RegistryServiceServer::new(RegistryFront(gw.clone())))
            .serve_with_incoming_shutdown(TcpIncoming::from(grpc).with_nodelay(Some(true)), async move {
                let _ = stop.wait_for(|s| *s).await;
            });
        tasks.push(tokio::spawn(async move {
            if let Err(e) = grpc_server.await {
                warn!(error = %e, "gateway gRPC server ended with an error");
            }
        }));

        let ready_placement = placement.clone();
        let ready: holdfast_telemetry::Readiness = Arc::new(move || ready_placement.ready());
        let app = crate::http::router(gw).merge(holdfast_telemetry::router(ready));
        let mut stop = rx.clone();
        tasks.push(tokio::spawn(async move {
            let served = axum::serve(http, app).with_graceful_shutdown(async move {
                let _ = stop.wait_for(|s| *s).await;
            });
            if let Err(e) = served.await {
                warn!(error = %e, "gateway HTTP server ended with an error");
            }
        }));
        info!(region = %cfg.region, grpc = %grpc_addr, http = %http_addr, "gateway started");
        Ok(GatewayServer { grpc_addr, http_addr, shutdown, tasks, upkeep, deadline: Duration::from_millis(cfg.shutdown_deadline_ms) })
    }

    pub fn grpc_addr(&self) -> SocketAddr {
        self.grpc_addr
    }

    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }

    /// Stops both ports and the placement follower, within the deadline.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        self.upkeep.abort();
        let aborts: Vec<_> = self.tasks.iter().map(JoinHandle::abort_handle).collect();
        let all = futures_util::future::join_all(self.tasks);
        if tokio::time::timeout(self.deadline, all).await.is_err() {
            warn!("gateway shutdown passed its deadline; stopping what is left");
            for a in aborts {
                a.abort();
            }
        }
    }
}
