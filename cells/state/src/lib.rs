//! holdfast-cell-state: the pure lock table of one cell.
//!
//! [`CellState::apply`] is the only way to change it: one committed Raft entry in,
//! one [`Applied`] (result plus Watch events) out. It reads no clock, draws no random
//! number and does no I/O, so every replica that applies the same log holds the same
//! state, and the whole thing is unit- and property-tested without tokio.
//!
//! What does not live here: timers (the cell leader measures TTLs, max hold, lock-delay
//! and wait timeouts on its monotonic clock and commits the decisions as commands),
//! Raft, networking, and the mapping of errors to gRPC/HTTP (that is `holdfast-core`).

mod codec;
mod command;
mod locks;
mod outcome;
mod reads;
mod sessions;
mod shards;
mod state;
mod volatile;

pub use codec::{CodecError, FORMAT_VERSION};
pub use command::{Command, Entry};
pub use locks::MAX_REASON_BYTES;
pub use outcome::{Applied, CellError, DequeueReason, Event, EventKind, Outcome};
pub use reads::{Compacted, HolderView, LockView, NamespaceStats, SessionView, ShardView, WaiterView};
pub use sessions::{MAX_HOLDS_AND_WAITS_PER_SESSION, MAX_LABEL_BYTES, MAX_OWNER_BYTES};
pub use state::{BreakRecord, CellState, AUDIT_CAP, ENDED_HOLDS_CAP, ENDED_REQUESTS_PER_SESSION, ENDED_SESSIONS_CAP, HISTORY_CAP};
pub use volatile::{RESERVE_BLOCK, RESERVE_LOW_WATER};
