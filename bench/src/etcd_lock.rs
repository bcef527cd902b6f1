//! The anchor: etcd's v3lock API, one lease per client (granted once, 60 s: no
//! keep-alive traffic during a run), `Lock` with the lease, `Unlock` with the key.
//!
//! Over mutual TLS when the run gives etcd's certificates (`--certs-dir` with `ca.crt`,
//! `client.crt`, `client.key`, as `scripts/anchors.sh` makes them): etcd as deployed,
//! beside holdfast as deployed.

use crate::Locker;
use etcd_client::{Certificate, Client, ConnectOptions, Identity, LockOptions, TlsOptions};
use std::path::Path;
use std::time::Duration;

/// A client of the etcd at `endpoints`: plaintext, or mutual TLS with the certificates
/// in `certs` (then `https://` is put before endpoints that have no scheme).
/// `request_timeout`: see [`EtcdLocker::connect`].
pub async fn client(endpoints: &[String], certs: Option<&Path>, request_timeout: Option<Duration>) -> Result<Client, String> {
    let mut options = request_timeout.map(|t| ConnectOptions::new().with_timeout(t).with_connect_timeout(t).with_keep_alive(Duration::from_millis(500), t));
    let mut endpoints = endpoints.to_vec();
    if let Some(dir) = certs {
        let read = |f: &str| std::fs::read(dir.join(f)).map_err(|e| format!("{}: {e}", dir.join(f).display()));
        let tls =
            TlsOptions::new().ca_certificate(Certificate::from_pem(read("ca.crt")?)).identity(Identity::from_pem(read("client.crt")?, read("client.key")?));
        options = Some(options.unwrap_or_default().with_tls(tls));
        for e in &mut endpoints {
            if !e.contains("://") {
                *e = format!("https://{e}");
            }
        }
    }
    Client::connect(endpoints, options).await.map_err(|e| e.to_string())
}

pub struct EtcdLocker {
    client: Client,
    lease: i64,
    held: Option<Vec<u8>>,
    /// The store revision the last grant answered at: larger for every later grant,
    /// so it can serve as a fencing token (`control`).
    revision: i64,
}

impl EtcdLocker {
    /// `request_timeout`: give up on a call after this long (the failover measurement
    /// sets 1 s, as an etcd client that must notice a dead member would: without it a
    /// call to a killed leader hangs for seconds). A v3lock call is idempotent per
    /// lease, so giving up and calling again is safe.
    pub async fn connect(endpoints: &[String], certs: Option<&Path>, request_timeout: Option<Duration>) -> Result<EtcdLocker, String> {
        let mut client = client(endpoints, certs, request_timeout).await?;
        let lease = client.lease_grant(60, None).await.map_err(|e| e.to_string())?.id();
        Ok(EtcdLocker { client, lease, held: None, revision: 0 })
    }

    /// A client whose lease (`ttl`, whole seconds) is kept alive at TTL/3 by a
    /// background task, as an application's is: the `control` holder, whose keep-alive
    /// stops when its process is paused.
    pub async fn with_kept_lease(endpoints: &[String], ttl: Duration) -> Result<EtcdLocker, String> {
        let mut client = client(endpoints, None, None).await?;
        let lease = client.lease_grant(ttl.as_secs().max(1) as i64, None).await.map_err(|e| e.to_string())?.id();
        let (mut keeper, mut answers) = client.lease_keep_alive(lease).await.map_err(|e| e.to_string())?;
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(ttl / 3).await;
                if keeper.keep_alive().await.is_err() || !matches!(answers.message().await, Ok(Some(r)) if r.ttl() > 0) {
                    return;
                }
            }
        });
        Ok(EtcdLocker { client, lease, held: None, revision: 0 })
    }

    pub fn lease(&self) -> i64 {
        self.lease
    }

    /// The revision of the last grant.
    pub fn revision(&self) -> i64 {
        self.revision
    }
}

impl Locker for EtcdLocker {
    async fn lock(&mut self, key: &str) -> Result<(), String> {
        let r = self.client.lock(key, Some(LockOptions::new().with_lease(self.lease))).await.map_err(|e| e.to_string())?;
        self.revision = r.header().map_or(0, |h| h.revision());
        self.held = Some(r.key().to_vec());
        Ok(())
    }

    async fn unlock(&mut self) -> Result<(), String> {
        match self.held.take() {
            Some(k) => self.client.unlock(k).await.map(|_| ()).map_err(|e| e.to_string()),
            None => Ok(()),
        }
    }
}

/// The anchor of `owner-lookups`: a service reading where a shard lives from one etcd
/// key (a range read, linearizable: etcd's default). The key is written once.
pub struct EtcdReader {
    client: Client,
}

const OWNER_KEY: &str = "bench-owner/default";

impl EtcdReader {
    pub async fn connect(endpoints: &[String], certs: Option<&Path>) -> Result<EtcdReader, String> {
        let mut client = client(endpoints, certs, None).await?;
        client.put(OWNER_KEY, "east-1", None).await.map_err(|e| e.to_string())?;
        Ok(EtcdReader { client })
    }
}

impl Locker for EtcdReader {
    async fn lock(&mut self, _key: &str) -> Result<(), String> {
        let r = self.client.get(OWNER_KEY, None).await.map_err(|e| e.to_string())?;
        r.kvs().first().map(drop).ok_or_else(|| "no owner key".to_owned())
    }

    async fn unlock(&mut self) -> Result<(), String> {
        Ok(())
    }
}
