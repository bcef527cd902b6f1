//! The `renewals` workload's background: many sessions (holdfast) or leases (etcd)
//! that do nothing but renew at TTL/3, as a cell's idle tenants do, while one client
//! runs `single` in the foreground. What is measured is the foreground's acquire p99
//! against `single` alone in the same run (docs/benchmarks.md).
//!
//! The sessions are created at an even pace over one renewal period, so their
//! renewals are spread over it as a long-running fleet's are, not bunched into one
//! burst every period. At the end every session is closed (every lease revoked), so
//! the next workload does not pay for their expiry.

use holdfast_client::{Client, ClientConfig, Session, SessionOptions};
use holdfast_rpc::{Security, Transport, TransportOptions};
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

/// Connections the background shares (an application fleet has many; one would
/// serialize every renewal behind one HTTP/2 connection's flow control).
const CONNECTIONS: usize = 16;

/// What the background did, reported beside the foreground's numbers.
#[derive(Debug, Serialize)]
pub struct BackgroundReport {
    pub sessions: usize,
    pub ttl_ms: u64,
    /// Seconds it took to create them all (one renewal period by design, longer if
    /// the service could not keep up).
    pub setup_s: f64,
    /// Sessions (leases) lost during the run: a renewal that did not land in time.
    pub lost: u64,
}

/// Starts making `n` things with `make(i)` at an even pace over `period` (each one
/// runs as a task of its own, so a slow one does not delay the next), and waits for all.
async fn paced<T, F, Fut>(n: usize, period: Duration, make: F) -> Result<Vec<T>, String>
where
    T: Send + 'static,
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<T, String>> + Send + 'static,
{
    let mut tick = tokio::time::interval(period / n.max(1) as u32);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut set = JoinSet::new();
    for i in 0..n {
        tick.tick().await;
        set.spawn(make(i));
    }
    let mut out = Vec::with_capacity(n);
    while let Some(r) = set.join_next().await {
        out.push(r.map_err(|e| e.to_string())??);
    }
    Ok(out)
}

/// holdfast: sessions in their own shard of the bench namespace, renewed by the SDK.
pub struct HoldfastRenewers {
    sessions: Vec<Session>,
    report: BackgroundReport,
}

impl HoldfastRenewers {
    pub async fn start(security: &Security, endpoints: &[String], ns: &str, shard: &str, n: usize, ttl: Duration) -> Result<HoldfastRenewers, String> {
        let started = Instant::now();
        let mut clients = Vec::new();
        for _ in 0..CONNECTIONS {
            let transport = Transport::new(TransportOptions::default(), security.clone());
            clients.push(Client::connect_via(&transport, endpoints, ClientConfig::default()).await.map_err(|e| e.to_string())?);
        }
        let (ns, shard) = (ns.to_owned(), shard.to_owned());
        let sessions = paced(n, ttl / 3, |i| {
            let client = clients[i % CONNECTIONS].clone();
            let opts = SessionOptions::new(ns.clone(), shard.clone(), ttl).label("bench-renewals");
            async move { client.create_session(opts).await.map_err(|e| e.to_string()) }
        })
        .await?;
        let report = BackgroundReport { sessions: n, ttl_ms: ttl.as_millis() as u64, setup_s: started.elapsed().as_secs_f64(), lost: 0 };
        Ok(HoldfastRenewers { sessions, report })
    }

    /// Counts the lost sessions, then closes every session. A session that cannot be
    /// closed (a lost one may be gone at the cell) is left to expire, and said so.
    pub async fn stop(mut self) -> Result<BackgroundReport, String> {
        self.report.lost = self.sessions.iter().filter(|s| s.is_lost()).count() as u64;
        let sessions = Arc::new(std::mem::take(&mut self.sessions));
        let mut set = JoinSet::new();
        for k in 0..64 {
            let sessions = sessions.clone();
            set.spawn(async move {
                let mut failed = 0;
                for s in sessions.iter().skip(k).step_by(64) {
                    failed += usize::from(s.close().await.is_err());
                }
                failed
            });
        }
        let mut failed = 0;
        while let Some(r) = set.join_next().await {
            failed += r.map_err(|e| e.to_string())?;
        }
        if failed > 0 {
            eprintln!("{failed} background sessions could not be closed; they expire after their TTL");
        }
        Ok(self.report)
    }
}

/// etcd: leases kept alive at TTL/3 over their keep-alive streams.
#[cfg(feature = "etcd")]
pub struct EtcdRenewers {
    client: etcd_client::Client,
    leases: Vec<i64>,
    tasks: JoinSet<()>,
    lost: Arc<std::sync::atomic::AtomicU64>,
    report: BackgroundReport,
}

#[cfg(feature = "etcd")]
impl EtcdRenewers {
    pub async fn start(endpoints: &[String], certs: Option<&std::path::Path>, n: usize, ttl: Duration) -> Result<EtcdRenewers, String> {
        use std::sync::atomic::{AtomicU64, Ordering};
        let started = Instant::now();
        let mut clients = Vec::new();
        for _ in 0..CONNECTIONS {
            clients.push(crate::etcd_lock::client(endpoints, certs, None).await?);
        }
        let lost = Arc::new(AtomicU64::new(0));
        let ttl_s = ttl.as_secs().max(1) as i64;
        let started_leases = paced(n, ttl / 3, |i| {
            let mut client = clients[i % CONNECTIONS].clone();
            let lost = lost.clone();
            async move {
                let id = client.lease_grant(ttl_s, None).await.map_err(|e| e.to_string())?.id();
                let (mut keeper, mut answers) = client.lease_keep_alive(id).await.map_err(|e| e.to_string())?;
                // Renewals keep the phase of the lease's grant, though the task starts later.
                let mut next = tokio::time::Instant::now();
                let renew = async move {
                    loop {
                        next += ttl / 3;
                        tokio::time::sleep_until(next).await;
                        let ok = match keeper.keep_alive().await {
                            Ok(()) => matches!(answers.message().await, Ok(Some(r)) if r.ttl() > 0),
                            Err(_) => false,
                        };
                        if !ok {
                            lost.fetch_add(1, Ordering::Relaxed);
                            return;
                        }
                    }
                };
                Ok((id, renew))
            }
        })
        .await?;
        let mut tasks = JoinSet::new();
        let mut leases = Vec::with_capacity(n);
        for (id, renew) in started_leases {
            leases.push(id);
            tasks.spawn(renew);
        }
        let report = BackgroundReport { sessions: n, ttl_ms: ttl.as_millis() as u64, setup_s: started.elapsed().as_secs_f64(), lost: 0 };
        Ok(EtcdRenewers { client: clients.swap_remove(0), leases, tasks, lost, report })
    }

    /// Counts the lost leases, stops renewing and revokes every lease.
    pub async fn stop(mut self) -> Result<BackgroundReport, String> {
        self.report.lost = self.lost.load(std::sync::atomic::Ordering::Relaxed);
        self.tasks.abort_all();
        let leases = Arc::new(std::mem::take(&mut self.leases));
        let mut set = JoinSet::new();
        for k in 0..64 {
            let (leases, mut client) = (leases.clone(), self.client.clone());
            set.spawn(async move {
                for id in leases.iter().skip(k).step_by(64) {
                    client.lease_revoke(*id).await.map_err(|e| e.to_string())?;
                }
                Ok::<_, String>(())
            });
        }
        while let Some(r) = set.join_next().await {
            r.map_err(|e| e.to_string())??;
        }
        Ok(self.report)
    }
}
