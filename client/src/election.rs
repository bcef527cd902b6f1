//! [`Election`]: leader election on one lock, the shape of etcd's
//! `concurrency.Election` — campaign until elected, see who leads, resign. A leader is
//! the holder of the election's lock, so it has a fencing token: pass
//! [`Lock::token`] with every write the leader makes, and a deposed leader that has
//! not noticed yet is refused by the resource. Candidates queue at the cell (no
//! polling); when the leader's session ends — resigned, closed, or expired after its
//! process died — the next in the queue is elected within the namespace's lock-delay
//! of the expiry.

use crate::client::traced;
use crate::error::Error;
use crate::lock::Lock;
use crate::session::{shard_ref, AcquireOptions, Session};
use holdfast_core::{ErrorCode, FencingToken, SessionId};
use holdfast_proto::lock::v1 as pb;
use holdfast_proto::lock::v1::lock_service_client::LockServiceClient;
use holdfast_rpc::Channel;
use std::time::Duration;
use tokio::time::Instant;

/// How long one queued campaign request waits before it is renewed (the cell's
/// longest wait is an hour).
const CAMPAIGN_WAIT: Duration = Duration::from_secs(600);

/// The leader as others see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    /// What the leader campaigned with (its address, its name).
    pub value: Vec<u8>,
    pub token: FencingToken,
    pub session: SessionId,
}

/// An election over the lock `name` in the session's shard.
#[derive(Debug, Clone)]
pub struct Election {
    session: Session,
    name: String,
}

impl Session {
    /// The election held on lock `name` of this session's shard.
    pub fn election(&self, name: &str) -> Election {
        Election { session: self.clone(), name: name.to_owned() }
    }
}

impl Election {
    /// Campaigns as `value` until elected (or the session is lost): the leadership is
    /// the returned [`Lock`] — its token fences the leader's writes, [`Lock::lost`]
    /// says when it ends, and releasing it resigns.
    pub async fn campaign(&self, value: impl Into<Vec<u8>>) -> Result<Lock, Error> {
        let value = value.into();
        loop {
            match self.session.acquire(&self.name, AcquireOptions::new().value(value.clone()).wait(CAMPAIGN_WAIT)).await {
                Err(e) if e.code() == Some(ErrorCode::Timeout) => continue,
                other => return other,
            }
        }
    }

    /// The current leader, if any (a linearizable read at the cell's leader).
    pub async fn leader(&self) -> Result<Option<Leader>, Error> {
        let shared = self.session.shared().clone();
        let req = pb::DescribeRequest { shard: Some(shard_ref(&shared.shard)), name: self.name.clone() };
        let cfg = *shared.client.config();
        let answer = shared
            .client
            .call(
                "describe",
                Instant::now() + cfg.retry.give_up_after,
                None,
                || cfg.request_timeout,
                |mut svc: LockServiceClient<Channel>| {
                    let req = traced(req.clone());
                    async move { svc.describe(req).await }
                },
            )
            .await;
        let d = match answer {
            Ok((d, _)) => d,
            Err(None) => return Err(shared.lost_error()),
            Err(Some(e)) => return Err(e),
        };
        Ok(d.holders.into_iter().max_by_key(|h| h.token).map(|h| Leader { value: h.value, token: FencingToken(h.token), session: SessionId(h.session_id) }))
    }
}
