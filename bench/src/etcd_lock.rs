//! The anchor: etcd's v3lock API, one lease per client (granted once, 60 s: no
//! keep-alive traffic during a run), `Lock` with the lease, `Unlock` with the key.

use crate::Locker;
use etcd_client::{Client, LockOptions};

pub struct EtcdLocker {
    client: Client,
    lease: i64,
    held: Option<Vec<u8>>,
}

impl EtcdLocker {
    pub async fn connect(endpoints: &[String]) -> Result<EtcdLocker, String> {
        let mut client = Client::connect(endpoints, None).await.map_err(|e| e.to_string())?;
        let lease = client.lease_grant(60, None).await.map_err(|e| e.to_string())?.id();
        Ok(EtcdLocker { client, lease, held: None })
    }
}

impl Locker for EtcdLocker {
    async fn lock(&mut self, key: &str) -> Result<(), String> {
        let r = self.client.lock(key, Some(LockOptions::new().with_lease(self.lease))).await.map_err(|e| e.to_string())?;
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
