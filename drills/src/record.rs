//! The recorder: every event of a drill, appended to `history.jsonl` as it happens.
//!
//! One mutex orders the lines, and the time is read under it, so line order is
//! real-time order and `t_ms` never decreases (the contract of
//! `crate::history`). A caller records an invocation *before* it sends
//! the request and the completion *after* the answer arrived.

use crate::history::{Event, EventKind, History, OpId};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").finish_non_exhaustive()
    }
}

pub struct Recorder {
    t0: Instant,
    next_op: AtomicU64,
    inner: Mutex<Inner>,
}

struct Inner {
    history: History,
    out: BufWriter<File>,
}

impl Recorder {
    pub fn create(path: &Path) -> Result<Arc<Recorder>, String> {
        let f = File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Arc::new(Recorder { t0: Instant::now(), next_op: AtomicU64::new(1), inner: Mutex::new(Inner { history: History::new(), out: BufWriter::new(f) }) }))
    }

    pub fn op(&self) -> OpId {
        OpId(self.next_op.fetch_add(1, Ordering::Relaxed))
    }

    /// Milliseconds since the drill started.
    pub fn ms(&self) -> u64 {
        u64::try_from(self.t0.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    pub fn record(&self, kind: EventKind) {
        let mut g = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let t_ms = self.ms();
        let wall_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
        let e = Event { t_ms, wall_ms, kind };
        // A line that cannot be written is a lost fact: say so loudly, but keep the
        // in-memory history (the checker reads that one).
        if let Err(err) = serde_json::to_string(&e).map_err(|x| x.to_string()).and_then(|l| writeln!(g.out, "{l}").map_err(|x| x.to_string())) {
            eprintln!("cannot append to the drill history: {err}");
        }
        g.history.events.push(e);
    }

    pub fn flush(&self) {
        let mut g = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = g.out.flush();
    }

    pub fn history(&self) -> History {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner).history.clone()
    }
}
