//! A drill report from a history and its check: per-wave timeline with durations,
//! per-namespace time without an owner, injected faults and violations — as Markdown,
//! JSON, and an SVG timeline written by hand (one row per wave).
//!
//! A shard counts as *without an owner* from an `OwnerObserved` that shows no cell or
//! a transfer in progress (new acquires are answered `MOVING` then) until one that
//! shows an owner at rest; still open at the end of the history, it closes there. A
//! namespace's time is the union of its shards' intervals (time during which at least
//! one of its shards had no owner).

use crate::checker::{CheckReport, Violation};
use crate::history::{EventKind, FaultKind, History};
use holdfast_core::{NamespaceName, ShardName};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One wave's span.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaveTiming {
    pub wave: u32,
    pub start_ms: u64,
    /// `None`: the wave never ended (aborted, or the drill stopped).
    pub end_ms: Option<u64>,
    /// Up to the end, or to the end of the history.
    pub duration_ms: u64,
}

/// A namespace's total time with some shard lacking an owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceGap {
    pub ns: NamespaceName,
    pub without_owner_ms: u64,
    /// The intervals `[from, to)` in drill ms.
    pub intervals: Vec<(u64, u64)>,
}

/// A fault, when it was injected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultAt {
    pub t_ms: u64,
    pub kind: FaultKind,
    pub target: String,
}

/// The drill report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DrillReport {
    pub title: String,
    pub duration_ms: u64,
    pub waves: Vec<WaveTiming>,
    pub namespaces: Vec<NamespaceGap>,
    pub faults: Vec<FaultAt>,
    pub violations: Vec<Violation>,
    pub malformed: Vec<String>,
}

impl DrillReport {
    /// Builds the report of `history`, with `check` the checker's answer for it.
    pub fn build(title: impl Into<String>, history: &History, check: &CheckReport) -> DrillReport {
        let end = history.end_ms();
        let mut waves: BTreeMap<u32, WaveTiming> = BTreeMap::new();
        let mut faults = Vec::new();
        let mut open: BTreeMap<(&NamespaceName, &ShardName), u64> = BTreeMap::new();
        let mut gaps: BTreeMap<&NamespaceName, Vec<(u64, u64)>> = BTreeMap::new();
        for e in &history.events {
            match &e.kind {
                EventKind::WaveStarted { wave } => {
                    waves.entry(*wave).or_insert(WaveTiming { wave: *wave, start_ms: e.t_ms, end_ms: None, duration_ms: 0 });
                }
                EventKind::WaveEnded { wave } => {
                    if let Some(w) = waves.get_mut(wave) {
                        w.end_ms.get_or_insert(e.t_ms);
                    }
                }
                EventKind::FaultInjected { kind, target } => faults.push(FaultAt { t_ms: e.t_ms, kind: *kind, target: target.clone() }),
                EventKind::OwnerObserved { ns, shard, cell, moving_to, .. } => {
                    gaps.entry(ns).or_default();
                    let ownerless = cell.is_none() || moving_to.is_some();
                    match (ownerless, open.get(&(ns, shard)).copied()) {
                        (true, None) => {
                            open.insert((ns, shard), e.t_ms);
                        }
                        (false, Some(from)) => {
                            open.remove(&(ns, shard));
                            gaps.entry(ns).or_default().push((from, e.t_ms));
                        }
                        _ => {}
                    }
                }
                _ => {}
            }
        }
        for ((ns, _), from) in open {
            gaps.entry(ns).or_default().push((from, end));
        }
        let waves = waves
            .into_values()
            .map(|mut w| {
                w.duration_ms = w.end_ms.unwrap_or(end).saturating_sub(w.start_ms);
                w
            })
            .collect();
        let namespaces = gaps
            .into_iter()
            .map(|(ns, intervals)| {
                let intervals = union(intervals);
                NamespaceGap { ns: ns.clone(), without_owner_ms: intervals.iter().map(|(a, b)| b - a).sum(), intervals }
            })
            .collect();
        DrillReport {
            title: title.into(),
            duration_ms: end,
            waves,
            namespaces,
            faults,
            violations: check.violations.clone(),
            malformed: check.malformed.clone(),
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report serializes")
    }

    pub fn to_markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# {}\n", self.title);
        let verdict = if self.violations.is_empty() { "no safety violations".to_owned() } else { format!("**{} safety violation(s)**", self.violations.len()) };
        let _ = writeln!(out, "Duration {} ms; {verdict}.\n", self.duration_ms);
        let _ = writeln!(out, "## Waves\n\n| wave | start (ms) | end (ms) | duration (ms) |\n|---:|---:|---:|---:|");
        for w in &self.waves {
            let end = w.end_ms.map_or("—".to_owned(), |e| e.to_string());
            let _ = writeln!(out, "| {} | {} | {end} | {} |", w.wave, w.start_ms, w.duration_ms);
        }
        let _ = writeln!(out, "\n## Time without an owner\n\n| namespace | ms | intervals |\n|---|---:|---|");
        for n in &self.namespaces {
            let spans: Vec<String> = n.intervals.iter().map(|(a, b)| format!("{a}–{b}")).collect();
            let _ = writeln!(out, "| {} | {} | {} |", n.ns, n.without_owner_ms, spans.join(", "));
        }
        if !self.faults.is_empty() {
            let _ = writeln!(out, "\n## Faults\n");
            for f in &self.faults {
                let _ = writeln!(out, "- {} ms: {} {}", f.t_ms, f.kind, f.target);
            }
        }
        let _ = writeln!(out, "\n## Violations\n");
        if self.violations.is_empty() {
            let _ = writeln!(out, "None.");
        }
        for v in &self.violations {
            let lines: Vec<String> = v.events.iter().map(|e| e.line.to_string()).collect();
            let _ = writeln!(out, "- **{}**: {} (history lines {})", v.kind, v.summary, lines.join(", "));
        }
        if !self.malformed.is_empty() {
            let _ = writeln!(out, "\n## History problems\n");
            for m in &self.malformed {
                let _ = writeln!(out, "- {m}");
            }
        }
        out
    }

    /// A horizontal timeline: one row per wave, a bar from its start to its end, and a
    /// red line at each fault. Plain SVG 1.1, no scripts, no external references.
    pub fn to_svg(&self) -> String {
        const LABEL: u64 = 110;
        const PLOT: u64 = 640;
        const ROW: u64 = 26;
        const TOP: u64 = 30;
        let span = self.duration_ms.max(1);
        let x = |ms: u64| LABEL + ms.min(span) * PLOT / span;
        let height = TOP + ROW * self.waves.len().max(1) as u64 + 30;
        let width = LABEL + PLOT + 20;
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(s, r#"<title>{}</title>"#, escape(&self.title));
        let _ = writeln!(s, r#"<text x="{LABEL}" y="18" font-weight="bold">{}</text>"#, escape(&self.title));
        for (i, w) in self.waves.iter().enumerate() {
            let y = TOP + ROW * i as u64;
            let x0 = x(w.start_ms);
            let x1 = x(w.start_ms + w.duration_ms).max(x0 + 1);
            let fill = if w.end_ms.is_some() { "#4a90d9" } else { "#d9a14a" };
            let _ = writeln!(s, r#"<text x="4" y="{}">wave {}</text>"#, y + 16, w.wave);
            let _ = writeln!(
                s,
                r#"<rect class="wave" x="{x0}" y="{}" width="{}" height="{}" fill="{fill}"><title>wave {}: {} ms</title></rect>"#,
                y + 4,
                x1 - x0,
                ROW - 8,
                w.wave,
                w.duration_ms
            );
            let _ = writeln!(s, r#"<text x="{}" y="{}">{} ms</text>"#, x1 + 4, y + 16, w.duration_ms);
        }
        let axis_y = TOP + ROW * self.waves.len().max(1) as u64 + 4;
        let _ = writeln!(s, r#"<line x1="{LABEL}" y1="{axis_y}" x2="{}" y2="{axis_y}" stroke="black"/>"#, LABEL + PLOT);
        let _ = writeln!(s, r#"<text x="{LABEL}" y="{}">0 ms</text>"#, axis_y + 16);
        let _ = writeln!(s, r#"<text x="{}" y="{}" text-anchor="end">{} ms</text>"#, LABEL + PLOT, axis_y + 16, self.duration_ms);
        for f in &self.faults {
            let fx = x(f.t_ms);
            let _ = writeln!(
                s,
                r##"<line class="fault" x1="{fx}" y1="{TOP}" x2="{fx}" y2="{axis_y}" stroke="#c0392b" stroke-dasharray="4 2"><title>{} ms: {} {}</title></line>"##,
                f.t_ms,
                f.kind,
                escape(&f.target)
            );
        }
        s.push_str("</svg>\n");
        s
    }
}

/// Merges overlapping or touching intervals.
fn union(mut v: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (a, b) in v {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::check;
    use holdfast_core::{CellId, Epoch};

    fn owner(h: &mut History, t: u64, ns: &str, shard: &str, cell: Option<&str>, moving_to: Option<&str>) {
        h.push(
            t,
            0,
            EventKind::OwnerObserved {
                ns: NamespaceName::new(ns).unwrap(),
                shard: ShardName::new(shard).unwrap(),
                cell: cell.map(|c| CellId::new(c).unwrap()),
                epoch: Epoch(1),
                moving_to: moving_to.map(|c| CellId::new(c).unwrap()),
            },
        );
    }

    fn history() -> History {
        let mut h = History::new();
        h.push(0, 0, EventKind::WaveStarted { wave: 0 });
        owner(&mut h, 10, "payments", "s0", Some("eu-west-1"), Some("us-east-1"));
        owner(&mut h, 15, "payments", "s1", Some("eu-west-1"), Some("us-east-1"));
        owner(&mut h, 40, "payments", "s0", Some("us-east-1"), None);
        owner(&mut h, 50, "payments", "s1", Some("us-east-1"), None);
        owner(&mut h, 55, "search", "default", Some("eu-west-2"), None);
        h.push(60, 0, EventKind::WaveEnded { wave: 0 });
        h.push(70, 0, EventKind::WaveStarted { wave: 1 });
        h.push(75, 0, EventKind::FaultInjected { kind: FaultKind::KillCellLeader, target: "us-east-1<n2>".into() });
        owner(&mut h, 80, "search", "default", None, None);
        h.push(100, 0, EventKind::WaveEnded { wave: 1 });
        h.push(110, 0, EventKind::WaveStarted { wave: 2 });
        h.push(120, 0, EventKind::FaultInjected { kind: FaultKind::Heal, target: "us-east-1".into() });
        h
    }

    #[test]
    fn waves_and_ownerless_time() {
        let h = history();
        let r = DrillReport::build("evacuate eu-west", &h, &check(&h));
        assert_eq!(r.duration_ms, 120);
        let d: Vec<(u32, u64, Option<u64>)> = r.waves.iter().map(|w| (w.wave, w.duration_ms, w.end_ms)).collect();
        assert_eq!(d, vec![(0, 60, Some(60)), (1, 30, Some(100)), (2, 10, None)]);
        let gap = |ns: &str| r.namespaces.iter().find(|n| n.ns.as_str() == ns).unwrap().clone();
        // s0 10..40 and s1 15..50 overlap: 40 ms for the namespace, not 65.
        assert_eq!(gap("payments").without_owner_ms, 40);
        assert_eq!(gap("payments").intervals, vec![(10, 50)]);
        // Still without an owner at the end.
        assert_eq!(gap("search").without_owner_ms, 40);
        assert_eq!(r.faults.len(), 2);
    }

    #[test]
    fn markdown_and_json() {
        let h = history();
        let r = DrillReport::build("evacuate eu-west", &h, &check(&h));
        let md = r.to_markdown();
        assert!(md.starts_with("# evacuate eu-west"), "{md}");
        assert!(md.contains("no safety violations"), "{md}");
        assert!(md.contains("| payments | 40 | 10–50 |"), "{md}");
        assert!(md.contains("| 2 | 110 | — | 10 |"), "{md}");
        let back: DrillReport = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn svg_is_well_formed_with_a_rect_per_wave() {
        let h = history();
        let svg = DrillReport::build("evacuate <eu-west> & more", &h, &check(&h)).to_svg();
        assert!(svg.starts_with("<svg "), "{svg}");
        assert!(svg.trim_end().ends_with("</svg>"), "{svg}");
        assert_eq!(svg.matches(r#"<rect class="wave""#).count(), 3, "{svg}");
        assert_eq!(svg.matches("<rect").count(), svg.matches("</rect>").count());
        assert_eq!(svg.matches(r#"class="fault""#).count(), 2);
        // Text is escaped: no stray markup from names.
        assert!(svg.contains("evacuate &lt;eu-west&gt; &amp; more"), "{svg}");
        assert!(svg.contains("us-east-1&lt;n2&gt;"), "{svg}");
        // Every element opened is closed (a crude well-formedness check).
        let opens = svg.matches('<').count();
        let closes = svg.matches('>').count();
        assert_eq!(opens, closes);
        // An empty report still draws.
        let empty = DrillReport::build("nothing", &History::new(), &CheckReport::default()).to_svg();
        assert!(empty.starts_with("<svg ") && !empty.contains("<rect"));
    }
}
