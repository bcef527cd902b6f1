//! Where the time of one Raft write goes, on the leader that proposed it: the log
//! store marks when each entry's append started and became durable, the state machine
//! when each entry's apply started and ended, and [`crate::Group::propose`] reads the
//! marks of its entry once its answer is back. From them come
//! `holdfast_raft_stage_seconds{stage}` and, when the proposal is traced, child spans
//! with the real start and end of each stage:
//!
//! - `queue`: from the proposal to the start of its log write (openraft batching);
//! - `append`: the leader's synced log write (fsync included);
//! - `commit`: from the log write's start until the entry is known committed and its
//!   apply starts (a quorum has it durable: the local write and the replication);
//! - `apply`: the state machine;
//! - `respond`: from the apply's end until the proposer has the answer.
//!
//! Marks are kept for the newest [`KEPT`] entries only; a follower's are never read.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Instant, SystemTime};

/// Entries whose marks are kept (older ones are dropped).
const KEPT: usize = 4096;

#[derive(Debug, Clone, Copy, Default)]
pub struct Marks {
    pub append: Option<(Instant, Instant)>,
    pub apply: Option<(Instant, Instant)>,
}

/// One node's marks, shared by its log store, state machine and proposers.
#[derive(Debug, Default)]
pub struct Stages {
    marks: Mutex<BTreeMap<u64, Marks>>,
}

impl Stages {
    fn with(&self, f: impl FnOnce(&mut BTreeMap<u64, Marks>)) {
        let mut m = self.marks.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut m);
        while m.len() > KEPT {
            m.pop_first();
        }
    }

    /// Entries `indexes` were written to the log between `start` and `end`.
    pub fn appended(&self, indexes: &[u64], start: Instant, end: Instant) {
        self.with(|m| {
            for i in indexes {
                m.entry(*i).or_default().append = Some((start, end));
            }
        });
    }

    /// Entry `index` was applied between `start` and `end`.
    pub fn applied(&self, index: u64, start: Instant, end: Instant) {
        self.with(|m| m.entry(index).or_default().apply = Some((start, end)));
    }

    /// The marks of `index`, removed.
    pub fn take(&self, index: u64) -> Option<Marks> {
        self.marks.lock().unwrap_or_else(|e| e.into_inner()).remove(&index)
    }
}

/// The stages of one proposal, from its start to its answer: (name, start, end).
pub fn stages_of(proposed: Instant, marks: &Marks, answered: Instant) -> Vec<(&'static str, Instant, Instant)> {
    let mut out = Vec::new();
    if let Some((a0, a1)) = marks.append {
        out.push(("queue", proposed, a0.max(proposed)));
        out.push(("append", a0, a1));
        if let Some((p0, _)) = marks.apply {
            out.push(("commit", a0, p0.max(a0)));
        }
    }
    if let Some((p0, p1)) = marks.apply {
        out.push(("apply", p0, p1));
        out.push(("respond", p1, answered.max(p1)));
    }
    out
}

/// Records the stages of one proposal: the histogram always, child spans of the
/// current span when it belongs to an exported trace.
pub fn record(proposed: Instant, marks: &Marks, answered: Instant) {
    let stages = stages_of(proposed, marks, answered);
    for (name, start, end) in &stages {
        metrics::histogram!(holdfast_core::metric_names::RAFT_STAGE, "stage" => *name).record(end.saturating_duration_since(*start).as_secs_f64());
    }
    spans(&stages);
}

fn spans(stages: &[(&'static str, Instant, Instant)]) {
    use opentelemetry::trace::{TraceContextExt, Tracer, TracerProvider};
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let parent = tracing::Span::current().context();
    if !parent.span().span_context().is_sampled() {
        return;
    }
    // An Instant as wall-clock time, for the exporter.
    let (now_i, now_s) = (Instant::now(), SystemTime::now());
    let wall = |i: Instant| now_s - now_i.saturating_duration_since(i);
    let tracer = opentelemetry::global::tracer_provider().tracer("holdfast-raft");
    for (name, start, end) in stages {
        let mut span = tracer.span_builder(format!("raft.{name}")).with_start_time(wall(*start)).start_with_context(&tracer, &parent);
        opentelemetry::trace::Span::end_with_timestamp(&mut span, wall(*end));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn stages_follow_the_marks_and_old_marks_are_dropped() {
        let t = Instant::now();
        let ms = |n: u64| t + Duration::from_millis(n);
        let s = Stages::default();
        s.appended(&[7, 8], ms(1), ms(3));
        s.applied(7, ms(5), ms(6));
        let m = s.take(7).unwrap();
        let got: Vec<(&str, u64)> = stages_of(t, &m, ms(7)).iter().map(|(n, a, b)| (*n, (*b - *a).as_millis() as u64)).collect();
        assert_eq!(got, vec![("queue", 1), ("append", 2), ("commit", 4), ("apply", 1), ("respond", 1)]);
        assert!(s.take(7).is_none(), "taken once");
        for i in 0..(KEPT as u64 + 10) {
            s.applied(100 + i, t, t);
        }
        assert!(s.take(8).is_none(), "the oldest marks were dropped");
        assert!(s.take(100 + KEPT as u64 + 9).is_some());
    }
}
