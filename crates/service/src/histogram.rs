//! Fixed-bound histograms and counters, in Prometheus's text format: the service's latencies
//! and the group commit's batches, counted with atomics so that observing takes no lock.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds of the group-commit batch-size histogram, puts.
pub const BATCH: [f64; 12] = [
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 4096.0,
];

/// A histogram of fixed bounds: counts per bound (not cumulative until rendered) and a sum.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    counts: Vec<AtomicU64>,
    /// The sum, in millionths of the unit.
    sum_micros: AtomicU64,
}

impl Histogram {
    /// An empty histogram of these upper bounds (ascending; `+Inf` is implied).
    pub fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_micros: AtomicU64::new(0),
        }
    }

    /// Counts one observation of `value`.
    pub fn observe(&self, value: f64) {
        let slot = self
            .bounds
            .iter()
            .position(|b| value <= *b)
            .unwrap_or(self.bounds.len());
        self.counts[slot].fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add((value * 1e6) as u64, Ordering::Relaxed);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// Writes the `_bucket`, `_sum` and `_count` lines of `name` with `labels` (`k="v",` or "").
    pub fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0;
        for (i, c) in self.counts.iter().enumerate() {
            cumulative += c.load(Ordering::Relaxed);
            let le = match self.bounds.get(i) {
                Some(b) => format!("{b}"),
                None => "+Inf".into(),
            };
            let _ = writeln!(out, "{name}_bucket{{{labels}le=\"{le}\"}} {cumulative}");
        }
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let bare = labels.trim_end_matches(',');
        let _ = writeln!(out, "{name}_sum{{{bare}}} {sum}");
        let _ = writeln!(out, "{name}_count{{{bare}}} {cumulative}");
    }
}

/// Writes each `(name, help, value)` as a Prometheus counter with its HELP and TYPE lines.
pub fn render_counters(out: &mut String, counters: &[(&str, &str, &AtomicU64)]) {
    for (name, help, v) in counters {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        let _ = writeln!(out, "{name} {}", v.load(Ordering::Relaxed));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_with_sum_and_count() {
        let h = Histogram::new(&BATCH);
        for v in [1.0, 3.0, 3.0, 5000.0] {
            h.observe(v);
        }
        let mut out = String::new();
        h.render(&mut out, "x", "bucket=\"b\",");
        assert!(out.contains("x_bucket{bucket=\"b\",le=\"1\"} 1\n"), "{out}");
        assert!(out.contains("x_bucket{bucket=\"b\",le=\"4\"} 3\n"), "{out}");
        assert!(
            out.contains("x_bucket{bucket=\"b\",le=\"+Inf\"} 4\n"),
            "{out}"
        );
        assert!(out.contains("x_sum{bucket=\"b\"} 5007\n"), "{out}");
        assert!(out.contains("x_count{bucket=\"b\"} 4\n"), "{out}");
    }
}
