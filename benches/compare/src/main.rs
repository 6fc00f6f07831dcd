//! The render-store comparison: wink's `Store` against redb and a file-per-render tree, the same
//! workload and the same durability for all three, one table of ratios and the project's targets.
//!
//! ```text
//! cd benches/compare && cargo run --release            # the full run (1,000,000 renders)
//! WINK_BENCH_RENDERS=50000 cargo run --release         # a quick run
//! ```
//!
//! Phases, per contender and durability mode (mode `end`: one commit at the end of each phase;
//! mode `1000`: one commit per 1,000 puts), each contender in its own child process (this program
//! re-executed with `load NAME MODE DIR`, so its VmHWM is its own):
//!
//! 1. import of every revision of `../shared/corpus/` (1,150, 128.8 MB; loaded into memory before
//!    the clock starts; skipped with a note when absent);
//! 2. `WINK_BENCH_RENDERS` renders (default 1,000,000) over `WINK_BENCH_TITLES` titles (default
//!    a tenth of that), 1–16 KiB each (see `workload`);
//! 3. `WINK_BENCH_READS` (default 100,000) random get_latest, then as many random get_render:
//!    each cold, then warm (the same keys again). "Cold": the contender is closed, the data
//!    files' pages are dropped with `posix_fadvise(DONTNEED)` on every data file, the index files
//!    are read whole (resident), and the contender is reopened (cold as docs/PERFORMANCE.md
//!    § Machine, ceilings and cold reads defines it). Data / index per contender: wink `c*.*` /
//!    `meta.*`; tree: render files / `.latest` pointer files (and the directories, whose blocks
//!    stay cached); redb: one file, so cold = everything dropped, its in-process cache emptied by
//!    the reopen.
//!
//! Then fresh processes (`open NAME DIR`) time opening the store plus one get_latest (the median
//! of five is reported).
//! Stores live in `WINK_BENCH_DIR` (default `target/wink-compare` of the project: a disk, not a
//! tmpfs) and are removed after each contender (`WINK_BENCH_KEEP=1` keeps them).
//! `WINK_BENCH_ONLY=wink,redb` and `WINK_BENCH_MODES=end` select; `WINK_CORPUS` moves the corpus.
//! The figures are saved in `WINK_BENCH_DIR/results-STAMP.json` after every contender (an
//! interrupted run keeps what it measured); `table FILE.json` reprints the table of a saved run
//! (the runs recorded in docs/PERFORMANCE.md are in `results/`); `reads NAME DIR` times warm
//! reads of a store kept with `WINK_BENCH_KEEP=1` (for profiling).

mod contender;
mod measure;
mod redb_store;
mod report;
mod run;
mod tree;
mod wink_store;
mod workload;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use contender::{Contender, Res};
use run::{LoadResult, Mode, OpenResult};

pub const CONTENDERS: [&str; 3] = ["wink", "redb", "tree"];

/// Run settings, from the environment.
#[derive(Clone, Debug)]
pub struct Settings {
    pub renders: u64,
    pub titles: u64,
    pub reads: usize,
    pub corpus: Option<PathBuf>,
    pub dir: PathBuf,
    pub keep: bool,
}

fn env_num(name: &str, default: u64) -> Res<u64> {
    match std::env::var(name) {
        Ok(v) => Ok(v.replace(['_', ','], "").parse()?),
        Err(_) => Ok(default),
    }
}

fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

impl Settings {
    fn from_env() -> Res<Settings> {
        let renders = env_num("WINK_BENCH_RENDERS", 1_000_000)?;
        let titles = env_num("WINK_BENCH_TITLES", (renders / 10).max(1))?;
        let reads = usize::try_from(env_num("WINK_BENCH_READS", 100_000)?)?;
        let corpus = std::env::var_os("WINK_CORPUS")
            .map(PathBuf::from)
            .unwrap_or_else(|| project_root().join("../shared/corpus"));
        let corpus = corpus.join("manifest.tsv").exists().then_some(corpus);
        let dir = std::env::var_os("WINK_BENCH_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| project_root().join("target/wink-compare"));
        Ok(Settings {
            renders,
            titles,
            reads,
            corpus,
            dir,
            keep: std::env::var("WINK_BENCH_KEEP").is_ok_and(|v| v == "1"),
        })
    }
}

fn dispatch_load(name: &str, mode: Mode, dir: &Path, s: &Settings) -> Res<LoadResult> {
    match name {
        "wink" => run::run_load::<wink_store::Wink>(name, mode, dir, s),
        "redb" => run::run_load::<redb_store::Redb>(name, mode, dir, s),
        "tree" => run::run_load::<tree::Tree>(name, mode, dir, s),
        _ => Err(format!("unknown contender {name}").into()),
    }
}

fn dispatch_open(name: &str, dir: &Path, s: &Settings) -> Res<OpenResult> {
    fn open<C: Contender>(dir: &Path, s: &Settings) -> Res<OpenResult> {
        run::run_open::<C>(dir, s)
    }
    match name {
        "wink" => open::<wink_store::Wink>(dir, s),
        "redb" => open::<redb_store::Redb>(dir, s),
        "tree" => open::<tree::Tree>(dir, s),
        _ => Err(format!("unknown contender {name}").into()),
    }
}

/// Runs this program again with `args`; returns the JSON it prints after `RESULT `.
fn child(args: &[&str]) -> Res<String> {
    let out = Command::new(std::env::current_exe()?)
        .args(args)
        .stderr(Stdio::inherit())
        .output()?;
    if !out.status.success() {
        return Err(format!("child {args:?} failed: {}", out.status).into());
    }
    let text = String::from_utf8(out.stdout)?;
    text.lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .map(str::to_string)
        .ok_or_else(|| format!("child {args:?} printed no result").into())
}

/// Open probes in fresh processes: the median of five (one probe alone is at the mercy of
/// whatever else the machine does in those milliseconds).
fn median_open(name: &str, dir: &str) -> Res<OpenResult> {
    let mut runs = Vec::new();
    for _ in 0..5 {
        runs.push(serde_json::from_str::<OpenResult>(&child(&[
            "open", name, dir,
        ])?)?);
    }
    runs.sort_by(|a, b| a.open_and_get_ms.total_cmp(&b.open_and_get_ms));
    Ok(runs.swap_remove(2))
}

fn orchestrate(s: &Settings) -> Res<()> {
    let only = std::env::var("WINK_BENCH_ONLY").unwrap_or_else(|_| CONTENDERS.join(","));
    let modes = std::env::var("WINK_BENCH_MODES").unwrap_or_else(|_| "end,1000".into());
    std::fs::create_dir_all(&s.dir)?;
    eprintln!(
        "renders {} over {} titles, {} reads per phase, corpus {}, stores in {}",
        s.renders,
        s.titles,
        s.reads,
        s.corpus
            .as_ref()
            .map_or("absent: import skipped".into(), |p| p.display().to_string()),
        s.dir.display()
    );
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    let path = s.dir.join(format!("results-{stamp}.json"));
    let mut saved = report::Saved {
        renders: s.renders,
        titles: s.titles,
        reads: s.reads,
        corpus: s.corpus.is_some(),
        rows: Vec::new(),
    };
    for mode in modes.split(',') {
        for name in only.split(',') {
            let dir = s.dir.join(format!("{name}-{mode}"));
            if dir.exists() {
                std::fs::remove_dir_all(&dir)?;
            }
            std::fs::create_dir_all(&dir)?;
            eprintln!("== {name}, commit {mode}");
            let dir_s = dir.to_str().ok_or("store path is not UTF-8")?;
            let load: LoadResult = serde_json::from_str(&child(&["load", name, mode, dir_s])?)?;
            let open = median_open(name, dir_s)?;
            if !s.keep {
                std::fs::remove_dir_all(&dir)?;
            }
            saved.rows.push(report::Row { load, open });
            // Saved after every contender: a full run takes most of an hour, and an interrupted
            // one keeps what it measured (`table FILE.json` prints it).
            std::fs::write(&path, serde_json::to_string_pretty(&saved)?)?;
            eprintln!("results so far saved in {}", path.display());
        }
    }
    report::print(&saved);
    Ok(())
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let s = Settings::from_env()?;
    let arg = |i: usize| args.get(i).map(String::as_str).ok_or("missing argument");
    match args.first().map(String::as_str) {
        None => orchestrate(&s),
        Some("load") => {
            let r = dispatch_load(arg(1)?, Mode::parse(arg(2)?)?, Path::new(arg(3)?), &s)?;
            println!("RESULT {}", serde_json::to_string(&r)?);
            Ok(())
        }
        Some("open") => {
            let r = dispatch_open(arg(1)?, Path::new(arg(2)?), &s)?;
            println!("RESULT {}", serde_json::to_string(&r)?);
            Ok(())
        }
        Some("reads") => {
            let dir = Path::new(arg(2)?);
            let r = match arg(1)? {
                "wink" => run::run_reads::<wink_store::Wink>(dir, &s)?,
                "redb" => run::run_reads::<redb_store::Redb>(dir, &s)?,
                "tree" => run::run_reads::<tree::Tree>(dir, &s)?,
                other => return Err(format!("unknown contender {other}").into()),
            };
            println!("RESULT {}", serde_json::to_string(&r)?);
            Ok(())
        }
        Some("table") => {
            let saved: report::Saved = serde_json::from_str(&std::fs::read_to_string(arg(1)?)?)?;
            report::print(&saved);
            Ok(())
        }
        Some(other) => Err(format!("unknown command {other} (load, open, table, or none)").into()),
    }
}
