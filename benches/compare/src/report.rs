//! The table of figures and ratios, and the targets (PASS/GAP).

use serde::{Deserialize, Serialize};

use crate::run::{LoadResult, OpenResult};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Row {
    pub load: LoadResult,
    pub open: OpenResult,
}

/// A whole run, as saved.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Saved {
    pub renders: u64,
    pub titles: u64,
    pub reads: usize,
    pub corpus: bool,
    pub rows: Vec<Row>,
}

const MIB: f64 = (1 << 20) as f64;

type Figure = (&'static str, fn(&Row) -> f64);

fn per_sec(n: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        n as f64 / secs
    } else {
        f64::NAN
    }
}

fn figures() -> Vec<Figure> {
    vec![
        ("import MB/s", |r| {
            per_sec(r.load.import_bytes, r.load.import_secs) / 1e6
        }),
        ("import puts/s", |r| {
            per_sec(r.load.import_puts, r.load.import_secs)
        }),
        ("import CPU s", |r| r.load.import_cpu),
        ("render load MB/s", |r| {
            per_sec(r.load.render_bytes, r.load.render_secs) / 1e6
        }),
        ("render load puts/s", |r| {
            per_sec(r.load.render_puts, r.load.render_secs)
        }),
        ("render load CPU µs/put", |r| {
            r.load.render_cpu * 1e6 / r.load.render_puts.max(1) as f64
        }),
        ("render load s waiting for a CPU", |r| r.load.render_runq),
        ("render load bytes to disk ÷ value bytes", |r| {
            r.load.render_write_bytes as f64 / r.load.render_bytes.max(1) as f64
        }),
        ("get_latest warm p50 µs", |r| r.load.latest_warm.p50),
        ("get_latest warm p99 µs", |r| r.load.latest_warm.p99),
        ("disk floor: raw cold pread p50 µs", |r| {
            r.load.raw_cold.as_ref().map_or(f64::NAN, |f| f.p50)
        }),
        ("disk floor: raw cold pread p99 µs", |r| {
            r.load.raw_cold.as_ref().map_or(f64::NAN, |f| f.p99)
        }),
        ("floor: raw warm pread into a new buffer p50 µs", |r| {
            r.load.raw_warm.as_ref().map_or(f64::NAN, |f| f.p50)
        }),
        ("get_latest cold p50 µs", |r| r.load.latest_cold.p50),
        ("get_latest cold p99 µs", |r| r.load.latest_cold.p99),
        ("get_render warm p50 µs", |r| r.load.render_warm.p50),
        ("get_render warm p99 µs", |r| r.load.render_warm.p99),
        ("get_render cold p50 µs", |r| r.load.render_cold.p50),
        ("get_render cold p99 µs", |r| r.load.render_cold.p99),
        ("disk MiB (st_blocks)", |r| r.load.disk_bytes as f64 / MIB),
        ("page cache growth MiB", |r| {
            r.load.cached_growth as f64 / MIB
        }),
        ("data resident after load MiB", |r| {
            r.load.data_resident as f64 / MIB
        }),
        ("peak RSS, render load MiB", |r| {
            r.load.peak_rss_load as f64 / MIB
        }),
        ("peak RSS, whole child MiB", |r| {
            r.load.peak_rss_all as f64 / MIB
        }),
        ("global cache drops by others during load", |r| {
            r.load.load_drops as f64
        }),
        ("read phases repeated (cache dropped by others)", |r| {
            r.load.read_retries as f64
        }),
        ("open ms", |r| r.open.open_ms),
        ("open + first get ms", |r| r.open.open_and_get_ms),
    ]
}

fn fmt(v: f64) -> String {
    if v.is_nan() {
        "–".into()
    } else if v.abs() >= 1000.0 {
        let s = format!("{:.0}", v);
        // Thousands separators for readability.
        let (sign, digits) = s.split_at(usize::from(s.starts_with('-')));
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        format!("{sign}{out}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn ratio(a: f64, b: f64) -> String {
    if a.is_nan() || b.is_nan() || b == 0.0 {
        "–".into()
    } else {
        format!("{:.2}", a / b)
    }
}

fn find<'a>(saved: &'a Saved, name: &str, mode: &str) -> Option<&'a Row> {
    saved
        .rows
        .iter()
        .find(|r| r.load.contender == name && r.load.mode == mode)
}

fn modes(saved: &Saved) -> Vec<String> {
    let mut m: Vec<String> = saved.rows.iter().map(|r| r.load.mode.clone()).collect();
    m.dedup();
    m
}

/// Prints the markdown table and the targets.
pub fn print(saved: &Saved) {
    println!(
        "\n{} renders over {} titles, {} reads per phase; corpus import {}",
        saved.renders,
        saved.titles,
        saved.reads,
        if saved.corpus {
            "included"
        } else {
            "skipped (no corpus)"
        }
    );
    println!("\n| figure | commit | wink | redb | tree | wink/redb | wink/tree |");
    println!("|---|---|---:|---:|---:|---:|---:|");
    for mode in modes(saved) {
        for (label, f) in figures() {
            let v = |name| find(saved, name, &mode).map_or(f64::NAN, f);
            let (w, r, t) = (v("wink"), v("redb"), v("tree"));
            println!(
                "| {label} | {} | {} | {} | {} | {} | {} |",
                mode_label(&mode),
                fmt(w),
                fmt(r),
                fmt(t),
                ratio(w, r),
                ratio(w, t)
            );
        }
    }
    print_targets(saved);
}

fn mode_label(mode: &str) -> String {
    if mode == "end" {
        "at end".into()
    } else {
        format!("per {mode}")
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "GAP"
    }
}

/// One target line: `value` against `limit`; `at_most` says which side passes.
fn target(what: &str, value: f64, limit: f64, at_most: bool) {
    if value.is_nan() {
        println!("- {what}: not measured");
        return;
    }
    let ok = if at_most {
        value <= limit
    } else {
        value >= limit
    };
    let gap = if ok {
        String::new()
    } else {
        format!(
            " (gap ×{:.2})",
            if at_most {
                value / limit
            } else {
                limit / value
            }
        )
    };
    println!(
        "- {what}: {} vs {} {}{gap}",
        fmt(value),
        fmt(limit),
        verdict(ok)
    );
}

fn print_targets(saved: &Saved) {
    println!("\nTargets (wink):");
    for mode in modes(saved) {
        let Some(w) = find(saved, "wink", &mode) else {
            continue;
        };
        let m = mode_label(&mode);
        target(
            &format!("[{m}] get_latest warm p50 ≤ 10 µs"),
            w.load.latest_warm.p50,
            10.0,
            true,
        );
        target(
            &format!("[{m}] get_latest warm p99 ≤ 50 µs"),
            w.load.latest_warm.p99,
            50.0,
            true,
        );
        let floor = w.load.raw_cold.as_ref().map_or(String::new(), |f| {
            format!(
                " (disk floor at the time: raw cold pread p50 {})",
                fmt(f.p50)
            )
        });
        target(
            &format!("[{m}] get_latest cold p50 ≤ 100 µs{floor}"),
            w.load.latest_cold.p50,
            100.0,
            true,
        );
        if let Some(r) = find(saved, "redb", &mode) {
            let wr = per_sec(w.load.render_puts, w.load.render_secs);
            let rr = per_sec(r.load.render_puts, r.load.render_secs);
            target(
                &format!("[{m}] render puts/s ≥ 2× redb's"),
                wr,
                2.0 * rr,
                false,
            );
            let wi = per_sec(w.load.import_bytes, w.load.import_secs);
            let ri = per_sec(r.load.import_bytes, r.load.import_secs);
            target(
                &format!("[{m}] import MB/s ≥ 2× redb's"),
                wi / 1e6,
                2.0 * ri / 1e6,
                false,
            );
        }
        target(
            &format!("[{m}] peak RSS during the render load ≤ 256 MiB"),
            w.load.peak_rss_load as f64 / MIB,
            256.0,
            true,
        );
        target(
            &format!("[{m}] open + first get ≤ 50 ms"),
            w.open.open_and_get_ms,
            50.0,
            true,
        );
    }
}
