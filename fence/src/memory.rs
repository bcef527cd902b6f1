//! [`MemoryFence`]: the fencing rule over a map in memory.

use crate::{admit, Accepted, FenceError, FencedStore, LockId, Mutation, Stored};
use holdfast_core::FencingToken;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// A fenced store in memory, for examples and tests of resources that live in
/// one process. It forgets everything, fences included, when dropped, so it must not
/// guard anything that outlives the process: a restarted resource would accept
/// any old token again. Use [`crate::RocksFence`] (or the SQL pattern) for that.
#[derive(Debug)]
pub struct MemoryFence {
    resource: String,
    /// One mutex over fences and data: check and write are trivially one step.
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    fences: HashMap<LockId, FencingToken>,
    data: BTreeMap<Vec<u8>, Stored>,
}

impl MemoryFence {
    /// An empty store for the resource named `resource` (the metric's label).
    pub fn new(resource: impl Into<String>) -> MemoryFence {
        crate::describe_metrics();
        MemoryFence { resource: resource.into(), state: Mutex::new(State::default()) }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every change below happens after the last fallible step, so a panic while
        // the lock was held left the state whole: go on with it.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl FencedStore for MemoryFence {
    fn resource(&self) -> &str {
        &self.resource
    }

    fn apply(&self, lock: &LockId, token: FencingToken, mutations: &[Mutation<'_>]) -> Result<Accepted, FenceError> {
        let mut state = self.state();
        let accepted = admit(&self.resource, lock, token, state.fences.get(lock).copied())?;
        if accepted.raised() {
            state.fences.insert(lock.clone(), token);
        }
        for m in mutations {
            match *m {
                Mutation::Put { key, value } => {
                    state.data.insert(key.to_vec(), Stored { value: value.to_vec(), token });
                }
                Mutation::Delete { key } => {
                    state.data.remove(key);
                }
            }
        }
        Ok(accepted)
    }

    fn highest(&self, lock: &LockId) -> Result<Option<FencingToken>, FenceError> {
        Ok(self.state().fences.get(lock).copied())
    }

    fn read(&self, key: &[u8]) -> Result<Option<Stored>, FenceError> {
        Ok(self.state().data.get(key).cloned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance;

    #[test]
    fn memory_fence_keeps_the_contract() {
        conformance::run_all(|| (MemoryFence::new("ledger"), ()));
    }
}
