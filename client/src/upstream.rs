//! Calling a replicated group (a cell, the registry) through any of its members: the
//! member that answered last first, one `NOT_LEADER` hint followed when it names a
//! member, transport failures moving on to the next. Channels are cached per address.
//!
//! Used by the gateway (cells and the registry) and by cells (the registry). A hint
//! is followed only to a configured member: a caller reaches a group the way its
//! operator configured, so a partitioned path stays partitioned.

use holdfast_core::ErrorCode;
use holdfast_proto::status::{code_of, leader_of, status};
use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;
use tonic::transport::{Channel, Endpoint};
use tonic::Status;

/// How long one call to one member may take before the next is tried. Calls that wait
/// in a lock's queue pass their own, longer budget.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(3);

/// The members of one group and what this gateway learned about them.
#[derive(Debug, Default)]
pub struct Upstream {
    members: Mutex<Vec<String>>,
    /// The member that answered last (the leader, usually).
    preferred: Mutex<Option<String>>,
    channels: Mutex<HashMap<String, Channel>>,
}

/// Why a call to a group failed.
#[derive(Debug)]
pub enum CallError {
    /// A member answered with this status (not `NOT_LEADER`): the group's answer.
    Answered(Status),
    /// No member could be reached, or none answered in time: the group is unreachable.
    Unreachable(String),
}

impl CallError {
    pub fn into_status(self) -> Status {
        match self {
            CallError::Answered(s) => s,
            CallError::Unreachable(m) => status(ErrorCode::Unavailable, m, None),
        }
    }
}

impl Upstream {
    pub fn new(members: Vec<String>) -> Upstream {
        Upstream { members: Mutex::new(members), ..Upstream::default() }
    }

    /// Replaces the member list (a cell's membership changed in the registry).
    pub fn set_members(&self, members: Vec<String>) {
        *self.members.lock().expect("members lock") = members;
    }

    fn channel(&self, addr: &str) -> Result<Channel, String> {
        let mut channels = self.channels.lock().expect("channels lock");
        if let Some(c) = channels.get(addr) {
            return Ok(c.clone());
        }
        let c = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| format!("bad member address {addr:?}: {e}"))?
            .connect_timeout(Duration::from_secs(1))
            .connect_lazy();
        channels.insert(addr.to_owned(), c.clone());
        Ok(c)
    }

    /// Calls `f` on members until one answers (see the module doc). `budget` bounds
    /// each attempt.
    pub async fn call<T, F, Fut>(&self, budget: Duration, f: F) -> Result<T, CallError>
    where
        F: Fn(Channel) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let members = self.members.lock().expect("members lock").clone();
        let preferred = self.preferred.lock().expect("preferred lock").clone().filter(|p| members.contains(p));
        let mut order: Vec<String> = preferred.iter().cloned().collect();
        order.extend(members.iter().filter(|m| preferred.as_ref() != Some(*m)).cloned());
        let mut last = "no member is known".to_owned();
        let mut hinted = false;
        let mut i = 0;
        while i < order.len() {
            let addr = order[i].clone();
            i += 1;
            let ch = match self.channel(&addr) {
                Ok(c) => c,
                Err(e) => {
                    last = e;
                    continue;
                }
            };
            match tokio::time::timeout(budget, f(ch)).await {
                Ok(Ok(r)) => {
                    *self.preferred.lock().expect("preferred lock") = Some(addr);
                    return Ok(r.into_inner());
                }
                Ok(Err(s)) if code_of(&s) == Some(ErrorCode::NotLeader) => {
                    last = format!("{addr}: {}", s.message());
                    if let Some(h) = leader_of(&s).filter(|h| !hinted && members.contains(h) && *h != addr) {
                        hinted = true;
                        order.retain(|o| *o != h);
                        order.insert(i.min(order.len()), h);
                    }
                }
                // The member answered but not with a holdfast code: transport trouble
                // (refused, reset, not yet listening). Try the next.
                Ok(Err(s)) if code_of(&s).is_none() => last = format!("{addr}: {}", s.message()),
                Ok(Err(s)) => return Err(CallError::Answered(s)),
                Err(_) => last = format!("{addr}: no answer within {budget:?}"),
            }
        }
        Err(CallError::Unreachable(last))
    }
}
