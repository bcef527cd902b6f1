//! Builders shared by the lock table's tests.
#![allow(dead_code)]

use holdfast_cell_state::{Applied, CellError, CellState, Command, Entry, Outcome};
use holdfast_core::{Epoch, FencingToken, Intent, LockName, Mode, NamespaceConfig, NamespaceName, RequestId, SessionId, ShardKey, ShardName};

pub fn ns() -> NamespaceName {
    NamespaceName::new("pay").unwrap()
}

pub fn key() -> ShardKey {
    ShardKey::new(ns(), ShardName::default_shard())
}

pub fn name(s: &str) -> LockName {
    LockName::new(s).unwrap()
}

pub fn rid(s: &str) -> RequestId {
    RequestId::new(s).unwrap()
}

pub fn config(lock_delay_ms: u64) -> NamespaceConfig {
    let mut c = NamespaceConfig::with_defaults(ns(), "team-pay", Intent::Correctness);
    c.lock_delay_ms = lock_delay_ms;
    c.version = 1;
    c
}

/// A test harness: the state plus a fake leader clock that only moves forward.
#[derive(Debug)]
pub struct Cell {
    pub state: CellState,
    pub now_ms: u64,
    /// The epoch acquires claim to believe in.
    pub epoch: Epoch,
}

impl Cell {
    /// A cell serving `pay/default` at epoch 1.
    pub fn new(lock_delay_ms: u64) -> Cell {
        Cell::with_config(config(lock_delay_ms))
    }

    pub fn with_config(config: NamespaceConfig) -> Cell {
        let mut c = Cell { state: CellState::new(), now_ms: 1_000, epoch: Epoch(1) };
        c.ok(Command::ApplyConfig { config });
        c.ok(Command::AdoptShard { shard: key(), epoch: Epoch(1), delayed_locks: vec![] });
        c
    }

    pub fn apply(&mut self, cmd: Command) -> Applied {
        self.now_ms += 10;
        self.state.apply(&Entry::new(self.now_ms, cmd))
    }

    pub fn ok(&mut self, cmd: Command) -> Outcome {
        let a = self.apply(cmd.clone());
        a.result.unwrap_or_else(|e| panic!("{cmd:?} refused: {e}"))
    }

    /// Applies a command that must be refused, and checks it changed nothing.
    pub fn refused(&mut self, cmd: Command) -> CellError {
        let before = self.state.clone();
        let a = self.apply(cmd.clone());
        let err = a.result.expect_err(&format!("{cmd:?} should be refused"));
        assert!(a.events.is_empty(), "a refused command emitted events");
        assert_eq!(before, self.state, "a refused command changed the state");
        err
    }

    pub fn session(&mut self, id: u64) -> SessionId {
        self.ok(Command::CreateSession { shard: key(), session: SessionId(id), ttl_ms: 3_000, label: format!("worker-{id}") });
        SessionId(id)
    }

    pub fn acquire_cmd(&self, s: SessionId, lock: &str, mode: Mode, r: &str, wait: bool) -> Command {
        Command::Acquire {
            shard: key(),
            epoch: Some(self.epoch),
            name: name(lock),
            session: s,
            mode,
            request_id: rid(r),
            value: format!("{s}").into_bytes(),
            wait,
        }
    }

    pub fn acquire(&mut self, s: SessionId, lock: &str, mode: Mode, r: &str, wait: bool) -> Outcome {
        let cmd = self.acquire_cmd(s, lock, mode, r, wait);
        self.ok(cmd)
    }

    pub fn grant(&mut self, s: SessionId, lock: &str, r: &str) -> FencingToken {
        match self.acquire(s, lock, Mode::Exclusive, r, false) {
            Outcome::Granted { token } => token,
            other => panic!("expected a grant, got {other:?}"),
        }
    }

    pub fn release(&mut self, lock: &str, token: FencingToken) -> Applied {
        self.apply(Command::Release { shard: key(), name: name(lock), token })
    }
}
