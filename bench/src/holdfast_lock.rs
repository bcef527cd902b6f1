//! holdfast through its SDK: one session per client (renewed in the background), an
//! exclusive acquire that waits, a release with the token.

use crate::Locker;
use holdfast_client::{AcquireOptions, Client, ClientConfig, Lock, Session, SessionOptions};
use holdfast_rpc::{CertFiles, Security, TlsMaterial, Transport, TransportOptions};
use std::time::Duration;

pub struct HoldfastLocker {
    session: Session,
    held: Option<Lock>,
}

/// Root's client certificate in `certs_dir`, or plaintext.
pub fn security(certs_dir: Option<&std::path::Path>) -> Result<Security, String> {
    match certs_dir {
        Some(d) => Ok(Security::Tls(std::sync::Arc::new(TlsMaterial::load(CertFiles::user(d, "root"))?))),
        None => Ok(Security::Insecure),
    }
}

impl HoldfastLocker {
    /// A client of its own (its own connections, as an application instance has).
    pub async fn connect(security: &Security, endpoints: &[String], ns: &str, shard: &str) -> Result<HoldfastLocker, String> {
        Self::with_ttl(security, endpoints, ns, shard, Duration::from_secs(10)).await
    }

    /// A client whose session has `ttl` (`control` uses a short one).
    pub async fn with_ttl(security: &Security, endpoints: &[String], ns: &str, shard: &str, ttl: Duration) -> Result<HoldfastLocker, String> {
        let transport = Transport::new(TransportOptions::default(), security.clone());
        let client = Client::connect_via(&transport, endpoints, ClientConfig::default()).await.map_err(|e| e.to_string())?;
        let session = client.create_session(SessionOptions::new(ns, shard, ttl).label("bench")).await.map_err(|e| e.to_string())?;
        Ok(HoldfastLocker { session, held: None })
    }

    pub fn session_id(&self) -> u64 {
        self.session.id().0
    }

    /// The fencing token of the lock held, if any.
    pub fn token(&self) -> Option<u64> {
        self.held.as_ref().map(|l| l.token().0)
    }
}

impl Locker for HoldfastLocker {
    async fn lock(&mut self, key: &str) -> Result<(), String> {
        let l = self.session.acquire(key, AcquireOptions::new().wait(Duration::from_secs(30))).await.map_err(|e| e.to_string())?;
        self.held = Some(l);
        Ok(())
    }

    async fn unlock(&mut self) -> Result<(), String> {
        match self.held.take() {
            Some(l) => l.release().await.map_err(|e| e.to_string()),
            None => Ok(()),
        }
    }
}

/// A service asking a gateway who owns a shard (`owner-lookups`): `lock` is one
/// `GetOwner`, answered from the gateway's placement cache; `unlock` does nothing.
pub struct OwnerReader {
    reg: holdfast_proto::registry::v1::registry_service_client::RegistryServiceClient<holdfast_rpc::Channel>,
    ns: String,
    shard: String,
}

impl OwnerReader {
    pub async fn connect(security: &Security, endpoints: &[String], ns: &str, shard: &str) -> Result<OwnerReader, String> {
        let endpoint = endpoints.first().ok_or("no endpoint")?;
        let ch = Transport::new(TransportOptions::default(), security.clone()).connect(endpoint).await.map_err(|e| e.to_string())?;
        Ok(OwnerReader { reg: holdfast_proto::registry::v1::registry_service_client::RegistryServiceClient::new(ch), ns: ns.into(), shard: shard.into() })
    }
}

impl Locker for OwnerReader {
    async fn lock(&mut self, _key: &str) -> Result<(), String> {
        let req = holdfast_proto::registry::v1::GetOwnerRequest { ns: self.ns.clone(), shard: self.shard.clone(), fresh: false };
        let r = self.reg.get_owner(req).await.map_err(|s| s.message().to_owned())?;
        r.into_inner().owner.map(drop).ok_or_else(|| "no owner".to_owned())
    }

    async fn unlock(&mut self) -> Result<(), String> {
        Ok(())
    }
}

/// The namespace of the `efficiency` workload: intent efficiency, so its locks live in
/// the cell leader's memory (docs/semantics.md).
pub const FAST_NS: &str = "bench-fast";

/// Creates the namespaces `bench` (correctness) and [`FAST_NS`] (efficiency), both
/// fail-closed (a gateway never answers the benchmark with an unfenced grant), with
/// the gateway's acquire-rate quota lifted so it does not cap the benchmark and no
/// lock-delay, and places shards `bench/default`, `bench/renewals` and
/// `bench-fast/default` on `cell`. What exists already is left alone.
pub async fn setup(security: &Security, endpoint: &str, cell: &str) -> Result<(), String> {
    use holdfast_proto::admin::v1 as apb;
    use holdfast_proto::lock::v1 as pb;
    use holdfast_proto::registry::v1 as rpb;
    use holdfast_proto::registry::v1::registry_service_client::RegistryServiceClient;
    let mut reg = RegistryServiceClient::new(Transport::new(TransportOptions::default(), security.clone()).connect(endpoint).await.map_err(|e| e.to_string())?);
    // `default` for the workloads, `renewals` for the background sessions of `renewals`.
    let namespaces = [("bench", pb::Intent::Correctness, &["default", "renewals"][..]), (FAST_NS, pb::Intent::Efficiency, &["default"][..])];
    for (ns, intent, shards) in namespaces {
        if reg.get_namespace(rpb::GetNamespaceRequest { name: ns.into() }).await.is_err() {
            let config = apb::NamespaceConfig {
                name: ns.into(),
                owner: "bench".into(),
                intent: intent as i32,
                posture: pb::Posture::FailClosed as i32,
                ttl_min_ms: 1_000,
                ttl_max_ms: 60_000,
                quotas: Some(apb::Quotas {
                    max_keys: 10_000,
                    max_sessions: 10_000,
                    max_waiters_per_lock: 1_000,
                    max_value_bytes: 1_024,
                    acquires_per_second: 1_000_000,
                }),
                ..Default::default()
            };
            reg.create_namespace(rpb::CreateNamespaceRequest { config: Some(config) }).await.map_err(|s| s.message().to_owned())?;
        }
        for shard in shards {
            let owner = reg.get_owner(rpb::GetOwnerRequest { ns: ns.into(), shard: (*shard).into(), fresh: true }).await;
            if owner.map(|o| o.into_inner().owner.is_none()).unwrap_or(true) {
                reg.place_shard(rpb::PlaceShardRequest { ns: ns.into(), shard: (*shard).into(), cell: cell.into() })
                    .await
                    .map_err(|s| s.message().to_owned())?;
            }
        }
    }
    // The cell serves the shard once it renewed with the registry: wait for a grant.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    for ns in ["bench", FAST_NS] {
        loop {
            match HoldfastLocker::connect(security, &[endpoint.to_owned()], ns, "default").await {
                Ok(mut l) => {
                    if l.lock("bench-setup").await.is_ok() {
                        l.unlock().await?;
                        break;
                    }
                }
                Err(e) if std::time::Instant::now() > deadline => return Err(e),
                Err(_) => {}
            }
            if std::time::Instant::now() > deadline {
                return Err(format!("shard {ns}/default is not served within 30 s"));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok(())
}
