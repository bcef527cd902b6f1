//! The registry's replicated state as the Raft substrate sees it: the pure ownership
//! map plus the hooks the server needs — the broadcast that feeds WatchOwnership, and
//! the leader's ownership leases (volatile; `Some` only while this node leads). None of
//! the hooks can change the replicated state.

use crate::leases::OwnershipLeases;
use holdfast_raft::ReplicatedState;
use holdfast_registry_state::{Entry, OwnershipEvent, RegistryState};
use std::io;
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;

/// Shared between the state machine (which fires events) and the server.
#[derive(Debug)]
pub struct Hooks {
    /// `Some` only while this node leads and has started its lease bookkeeping.
    /// Lock order: this mutex, then the state's lock (never the other way round).
    pub leases: Mutex<Option<OwnershipLeases>>,
    events: broadcast::Sender<OwnershipEvent>,
}

impl Hooks {
    pub fn new() -> Arc<Hooks> {
        let (events, _) = broadcast::channel(4096);
        Arc::new(Hooks { leases: Mutex::new(None), events })
    }

    /// A stream of every ownership event applied from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<OwnershipEvent> {
        self.events.subscribe()
    }
}

/// The ownership map plus its hooks.
#[derive(Debug)]
pub struct RegistryMachine {
    state: RegistryState,
    hooks: Arc<Hooks>,
}

impl RegistryMachine {
    pub fn new(hooks: Arc<Hooks>) -> RegistryMachine {
        RegistryMachine { state: RegistryState::new(), hooks }
    }

    pub fn state(&self) -> &RegistryState {
        &self.state
    }
}

impl ReplicatedState for RegistryMachine {
    fn apply(&mut self, log_index: u64, payload: &[u8]) -> io::Result<Vec<u8>> {
        let entry = Entry::decode(payload).map_err(|e| holdfast_raft::undecodable("registry", log_index, &e))?;
        let applied = self.state.apply(&entry);
        for ev in &applied.events {
            // No receivers is fine: nobody watches.
            let _ = self.hooks.events.send(ev.clone());
        }
        Ok(applied.encode())
    }

    fn snapshot(&self) -> Vec<u8> {
        self.state.snapshot()
    }

    fn restore(&mut self, data: &[u8]) -> io::Result<()> {
        // The leases stay valid: they record grants made, whatever state they came from.
        self.state = RegistryState::restore(data).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        Ok(())
    }
}
