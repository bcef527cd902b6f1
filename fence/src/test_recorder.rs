//! A tiny `metrics` recorder for tests: counters and histograms by name and labels, and the names
//! that got a description. Install it per thread with `metrics::with_local_recorder`.

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Debug, Default)]
pub(crate) struct TestRecorder {
    counters: Mutex<HashMap<String, Arc<AtomicU64>>>,
    histograms: Mutex<HashMap<String, Arc<Samples>>>,
    described: Mutex<Vec<String>>,
}

/// A histogram's recorded values.
#[derive(Debug, Default)]
pub(crate) struct Samples(Mutex<Vec<f64>>);

impl metrics::HistogramFn for Samples {
    fn record(&self, value: f64) {
        self.0.lock().unwrap().push(value);
    }
}

impl TestRecorder {
    /// The counter `name{label=value,...}` (labels in the order given), 0 if never touched.
    pub(crate) fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        let key = render(name, labels.iter().map(|(k, v)| (*k, *v)));
        self.counters.lock().unwrap().get(&key).map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// The values recorded in histogram `name{labels}`.
    pub(crate) fn histogram(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        let key = render(name, labels.iter().map(|(k, v)| (*k, *v)));
        self.histograms.lock().unwrap().get(&key).map_or_else(Vec::new, |h| h.0.lock().unwrap().clone())
    }

    pub(crate) fn is_described(&self, name: &str) -> bool {
        self.described.lock().unwrap().iter().any(|d| d == name)
    }
}

fn render<'a>(name: &str, labels: impl Iterator<Item = (&'a str, &'a str)>) -> String {
    let labels: Vec<String> = labels.map(|(k, v)| format!("{k}={v}")).collect();
    format!("{name}{{{}}}", labels.join(","))
}

impl Recorder for TestRecorder {
    fn describe_counter(&self, key: KeyName, _unit: Option<Unit>, _description: SharedString) {
        self.described.lock().unwrap().push(key.as_str().to_owned());
    }

    fn describe_gauge(&self, _key: KeyName, _unit: Option<Unit>, _description: SharedString) {}

    fn describe_histogram(&self, key: KeyName, _unit: Option<Unit>, _description: SharedString) {
        self.described.lock().unwrap().push(key.as_str().to_owned());
    }

    fn register_counter(&self, key: &Key, _metadata: &Metadata<'_>) -> Counter {
        let rendered = render(key.name(), key.labels().map(|l| (l.key(), l.value())));
        let cell = self.counters.lock().unwrap().entry(rendered).or_default().clone();
        Counter::from_arc(cell)
    }

    fn register_gauge(&self, _key: &Key, _metadata: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, key: &Key, _metadata: &Metadata<'_>) -> Histogram {
        let rendered = render(key.name(), key.labels().map(|l| (l.key(), l.value())));
        let cell = self.histograms.lock().unwrap().entry(rendered).or_default().clone();
        Histogram::from_arc(cell)
    }
}
