//! One contender's whole run, inside its own child process (so VmHWM is its own): create, import
//! the corpus, load the renders, measure, read cold and warm. And the open-time probe.

use std::path::Path;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use wink::storage::residency;

use crate::contender::{Contender, Files, Res};
use crate::measure::{self, Latencies};
use crate::workload::{read_keys, Corpus, PutBuf, Renders, RENDER_DOMAIN};
use crate::Settings;

/// Durability modes: one commit at the end of each phase, or one per `n` puts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mode {
    AtEnd,
    Every(u64),
}

impl Mode {
    pub fn parse(s: &str) -> Res<Mode> {
        match s {
            "end" => Ok(Mode::AtEnd),
            n => Ok(Mode::Every(n.parse()?)),
        }
    }

    pub fn name(self) -> String {
        match self {
            Mode::AtEnd => "end".into(),
            Mode::Every(n) => n.to_string(),
        }
    }

    fn batch(self, total: u64) -> u64 {
        match self {
            Mode::AtEnd => total.max(1),
            Mode::Every(n) => n.max(1),
        }
    }
}

/// A read phase's figures (µs).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ReadFigures {
    pub p50: f64,
    pub p99: f64,
    pub mean: f64,
}

/// Everything one load child reports.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LoadResult {
    pub contender: String,
    pub mode: String,
    pub import_puts: u64,
    pub import_bytes: u64,
    pub import_secs: f64,
    /// CPU seconds (user + system) of the import.
    #[serde(default)]
    pub import_cpu: f64,
    /// Seconds of the import spent waiting for a CPU (other processes running).
    #[serde(default)]
    pub import_runq: f64,
    pub render_puts: u64,
    pub render_bytes: u64,
    pub render_secs: f64,
    #[serde(default)]
    pub render_cpu: f64,
    #[serde(default)]
    pub render_runq: f64,
    /// Bytes the render load sent to the disk (/proc/self/io write_bytes), values included.
    #[serde(default)]
    pub render_write_bytes: u64,
    pub commits: u64,
    /// VmHWM over the render load (reset just before it).
    pub peak_rss_load: u64,
    /// VmHWM of the whole child (the corpus buffer included).
    pub peak_rss_all: u64,
    /// /proc/meminfo Cached after the load minus before the import.
    pub cached_growth: i64,
    /// Bytes of the data files resident right after the load (mincore), and their size.
    pub data_resident: u64,
    pub data_bytes: u64,
    pub disk_bytes: u64,
    /// The disk's floor at the time: random 1–16 KiB preads, page cache dropped, of the
    /// largest data file (when it has at least 64 MiB; not for the tree's small files).
    #[serde(default)]
    pub raw_cold: Option<ReadFigures>,
    /// The same preads again, the pages now cached, each into a new buffer as a get's value:
    /// the floor under a warm get that makes one pread.
    #[serde(default)]
    pub raw_warm: Option<ReadFigures>,
    pub latest_cold: ReadFigures,
    pub latest_warm: ReadFigures,
    pub render_cold: ReadFigures,
    pub render_warm: ReadFigures,
    /// Bytes read back per phase of gets (values), for the record.
    pub read_bytes: u64,
    /// Global page-cache drops (/proc/vmstat drop_pagecache, another process's `drop_caches`)
    /// during the load: its page-cache figures and timing are then disturbed.
    #[serde(default)]
    pub load_drops: u64,
    /// Read phases repeated because the page cache was dropped globally during them.
    #[serde(default)]
    pub read_retries: u64,
}

/// What the open probe reports.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct OpenResult {
    pub open_ms: f64,
    pub open_and_get_ms: f64,
}

fn step(what: &str) {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let start = START.get_or_init(Instant::now);
    eprintln!("  [{:7.1} s] {what}", start.elapsed().as_secs_f64());
}

/// What a load phase took.
struct Loaded {
    secs: f64,
    cpu: f64,
    runq: f64,
    bytes: u64,
    write_bytes: u64,
    commits: u64,
}

/// Runs `n` puts through `c` in batches of the mode.
fn load<C: Contender>(
    c: &mut C,
    n: u64,
    mode: Mode,
    fill: &mut dyn FnMut(u64, &mut PutBuf),
) -> Res<Loaded> {
    let batch = mode.batch(n);
    let mut bytes = 0u64;
    let mut commits = 0;
    let (start, cpu0, runq0, written0) = (
        Instant::now(),
        measure::cpu_secs(),
        measure::runqueue_secs()?,
        measure::io_write_bytes()?,
    );
    let mut done = 0;
    while done < n {
        let this = batch.min(n - done);
        c.write_batch(this, &mut |i, buf| {
            fill(done + i, buf);
            bytes += buf.value.len() as u64;
        })?;
        done += this;
        commits += 1;
    }
    Ok(Loaded {
        secs: start.elapsed().as_secs_f64(),
        cpu: measure::cpu_secs() - cpu0,
        runq: measure::runqueue_secs()? - runq0,
        bytes,
        write_bytes: measure::io_write_bytes()? - written0,
        commits,
    })
}

fn figures(lat: &mut Latencies) -> ReadFigures {
    let mean = lat.0.iter().sum::<u64>() as f64 / lat.0.len().max(1) as f64 / 1000.0;
    ReadFigures {
        p50: lat.quantile_us(0.5),
        p99: lat.quantile_us(0.99),
        mean,
    }
}

/// Drops the data files' pages, makes the index files resident, reopens the contender (so an
/// in-process cache starts empty too).
fn go_cold<C: Contender>(c: C, dir: &Path) -> Res<C> {
    drop(c);
    let mut err = Ok(());
    C::visit(dir, Files::Data, &mut |p| {
        if err.is_ok() {
            err = measure::drop_cache(p);
        }
    })?;
    err?;
    let mut index_bytes = 0;
    let mut err = Ok(());
    C::visit(
        dir,
        Files::Index,
        &mut |p| match measure::make_resident(p) {
            Ok(n) => index_bytes += n,
            Err(e) => err = Err(e),
        },
    )?;
    err?;
    step(&format!(
        "cold: data pages dropped, {index_bytes} index bytes resident"
    ));
    C::open(dir)
}

/// Random cold preads of 1–16 KiB (4096-aligned buffer) from the largest data file: what the
/// disk gives at the moment, for reading the cold figures beside; then the same preads warm.
fn raw_reads<C: Contender>(dir: &Path, n: usize) -> Res<Option<(ReadFigures, ReadFigures)>> {
    use std::os::unix::fs::FileExt;
    let mut largest: Option<(u64, std::path::PathBuf)> = None;
    C::visit(dir, Files::Data, &mut |p| {
        let len = std::fs::metadata(p).map_or(0, |m| m.len());
        if largest.as_ref().is_none_or(|(l, _)| len > *l) {
            largest = Some((len, p.to_path_buf()));
        }
    })?;
    let Some((len, path)) = largest.filter(|(l, _)| *l >= 64 << 20) else {
        return Ok(None);
    };
    measure::drop_cache(&path)?;
    let file = std::fs::File::open(&path)?;
    let mut rng = wink_harness::synth::Rng::new(5);
    let mut buf = vec![0u8; (32 << 10) + 4096];
    let skip = (4096 - buf.as_ptr() as usize % 4096) % 4096;
    let mut lat = Latencies(Vec::with_capacity(n));
    let mut reads = Vec::with_capacity(n);
    for _ in 0..n {
        let size = 1024 + rng.below(15 << 10) as usize;
        let at = rng.below(len - size as u64);
        let start = Instant::now();
        file.read_exact_at(&mut buf[skip..skip + size], at)?;
        lat.0.push(start.elapsed().as_nanos() as u64);
        reads.push((at, size));
    }
    let mut warm = Latencies(Vec::with_capacity(n));
    for &(at, size) in &reads {
        let start = Instant::now();
        let mut value = vec![0u8; size];
        file.read_exact_at(&mut value, at)?;
        warm.0.push(start.elapsed().as_nanos() as u64);
        std::hint::black_box(&value);
    }
    step(&format!(
        "disk floor: {n} raw cold reads of {}, then warm",
        path.display()
    ));
    Ok(Some((figures(&mut lat), figures(&mut warm))))
}

/// Another process dropped the whole page cache (`drop_caches`) during a read phase, which
/// makes warm reads cold and evicts the index of cold ones: the phase is repeated, a few times.
fn disturbed(retries: u64) -> Res<()> {
    step("the page cache was dropped by another process during the phase: repeating it");
    if retries > 8 {
        return Err(
            "the page cache was dropped during every attempt; run when the machine is quieter"
                .into(),
        );
    }
    Ok(())
}

/// Checks a value read back against the render it should be.
struct Checker {
    header: Vec<u8>,
    failures: u64,
}

impl Checker {
    fn check(&mut self, t: u64, k: u64, rev: u64, tid: uuid::Uuid, value: &[u8]) {
        let ok = rev == Renders::rev(t, k)
            && tid == Renders::tid(t, k)
            && value.len() == Renders::value_len(t, k)
            && value.starts_with(&self.header);
        self.failures += u64::from(!ok);
    }
}

/// Times one get per key; `latest` picks get_latest, else get_render. Returns bytes read.
fn read_phase<C: Contender>(c: &C, keys: &[(u64, u64)], latest: bool) -> Res<(Latencies, u64)> {
    let mut lat = Latencies(Vec::with_capacity(keys.len()));
    let mut chk = Checker {
        header: Vec::new(),
        failures: 0,
    };
    let mut bytes = 0u64;
    for &(t, k) in keys {
        let title = Renders::title(t);
        let (rev, tid) = (Renders::rev(t, k), Renders::tid(t, k));
        Renders::header(t, k, &mut chk.header);
        let mut seen = |r: u64, id: uuid::Uuid, v: &[u8]| {
            bytes += v.len() as u64;
            chk.check(t, k, r, id, v);
        };
        let start = Instant::now();
        let found = if latest {
            c.get_latest(RENDER_DOMAIN, &title, &mut seen)?
        } else {
            c.get_render(RENDER_DOMAIN, &title, rev, tid, &mut seen)?
        };
        lat.0.push(start.elapsed().as_nanos() as u64);
        if !found {
            return Err(format!("render {t}/{k} ({title} rev {rev}) not found").into());
        }
    }
    if chk.failures > 0 {
        return Err(format!("{} reads returned the wrong render or bytes", chk.failures).into());
    }
    Ok((lat, bytes))
}

/// The whole run of one contender in one mode; the store is made in `dir`.
pub fn run_load<C: Contender>(name: &str, mode: Mode, dir: &Path, s: &Settings) -> Res<LoadResult> {
    let mut r = LoadResult {
        contender: name.into(),
        mode: mode.name(),
        ..LoadResult::default()
    };
    let corpus = match &s.corpus {
        Some(path) => Some(Corpus::load(path)?),
        None => None,
    };
    let w = Renders::new(s.renders, s.titles);
    let mut c = C::create(dir)?;
    let cached0 = measure::meminfo("Cached")?;
    let drops0 = measure::global_drops()?;
    if let Some(corpus) = corpus {
        step(&format!("import: {} revisions", corpus.entries.len()));
        let n = corpus.entries.len() as u64;
        let l = load(&mut c, n, mode, &mut |i, buf| corpus.fill(i as usize, buf))?;
        (r.import_puts, r.import_bytes, r.import_secs) = (n, l.bytes, l.secs);
        (r.import_cpu, r.import_runq) = (l.cpu, l.runq);
        r.commits += l.commits;
    }
    // The corpus buffer is gone before the render load, so the load's peak is the store's.
    // SAFETY: malloc_trim only returns free heap memory to the kernel.
    unsafe { libc::malloc_trim(0) };
    measure::reset_peak_rss()?;
    step(&format!("renders: {} over {} titles", w.total(), w.titles));
    let l = load(&mut c, w.total(), mode, &mut |i, buf| {
        let (t, k) = w.put_key(i);
        w.fill(t, k, buf)
    })?;
    (r.render_puts, r.render_bytes, r.render_secs, r.render_cpu) =
        (w.total(), l.bytes, l.secs, l.cpu);
    r.render_runq = l.runq;
    r.render_write_bytes = l.write_bytes;
    r.commits += l.commits;
    r.peak_rss_load = measure::status("VmHWM")?;
    r.cached_growth = measure::meminfo("Cached")? as i64 - cached0 as i64;
    r.load_drops = measure::global_drops()? - drops0;
    step(&format!(
        "loaded in {:.1} s ({:.1} s CPU, {:.1} s waiting for a CPU); measuring residency and disk",
        l.secs, l.cpu, l.runq
    ));
    let mut err = Ok(());
    C::visit(dir, Files::Data, &mut |p| match residency(p) {
        Ok((res, len)) => {
            r.data_resident += res;
            r.data_bytes += len;
        }
        Err(e) => err = Err(e),
    })?;
    err?;
    r.disk_bytes = measure::disk_bytes(dir)?;
    if let Some((cold, warm)) = raw_reads::<C>(dir, s.reads.min(5000))? {
        r.raw_cold = Some(cold);
        r.raw_warm = Some(warm);
    }
    let latest_keys = read_keys(&w, s.reads, 1, true);
    let render_keys = read_keys(&w, s.reads, 2, false);
    for (latest, keys) in [(true, &latest_keys), (false, &render_keys)] {
        let what = if latest { "get_latest" } else { "get_render" };
        let (mut cold, bytes, mut seen) = loop {
            let before = measure::global_drops()?;
            c = go_cold(c, dir)?;
            step(&format!("{what}: {} cold", keys.len()));
            let (lat, bytes) = read_phase(&c, keys, latest)?;
            let after = measure::global_drops()?;
            if after == before {
                break (lat, bytes, after);
            }
            r.read_retries += 1;
            disturbed(r.read_retries)?;
        };
        let mut warm = loop {
            step(&format!(
                "{what}: {} warm (the same keys again)",
                keys.len()
            ));
            let (lat, _) = read_phase(&c, keys, latest)?;
            let after = measure::global_drops()?;
            if after == seen {
                break lat;
            }
            r.read_retries += 1;
            disturbed(r.read_retries)?;
            seen = after;
            // Warm the keys again before the next timed pass.
            read_phase(&c, keys, latest)?;
        };
        r.read_bytes += bytes;
        let (cold, warm) = (figures(&mut cold), figures(&mut warm));
        if latest {
            (r.latest_cold, r.latest_warm) = (cold, warm);
        } else {
            (r.render_cold, r.render_warm) = (cold, warm);
        }
    }
    r.peak_rss_all = measure::status("VmHWM")?;
    Ok(r)
}

/// A fresh process opens the full store and reads one title's latest render.
pub fn run_open<C: Contender>(dir: &Path, s: &Settings) -> Res<OpenResult> {
    let w_titles = Renders::new(s.renders, s.titles);
    let (t, _) = read_keys(&w_titles, 1, 3, true)[0];
    let title = Renders::title(t);
    let start = Instant::now();
    let c = C::open(dir)?;
    let open = start.elapsed();
    let found = c.get_latest(RENDER_DOMAIN, &title, &mut |_, _, _| {})?;
    let total = start.elapsed();
    if !found {
        return Err(format!("{title}: no latest render after reopening").into());
    }
    Ok(OpenResult {
        open_ms: open.as_secs_f64() * 1e3,
        open_and_get_ms: total.as_secs_f64() * 1e3,
    })
}

/// Warm reads of an existing store (for profiling): the keys once to warm, then timed.
pub fn run_reads<C: Contender>(dir: &Path, s: &Settings) -> Res<(ReadFigures, ReadFigures)> {
    let w = Renders::new(s.renders, s.titles);
    let c = C::open(dir)?;
    let latest_keys = read_keys(&w, s.reads, 1, true);
    let render_keys = read_keys(&w, s.reads, 2, false);
    read_phase(&c, &latest_keys, true)?;
    let (mut latest, _) = read_phase(&c, &latest_keys, true)?;
    read_phase(&c, &render_keys, false)?;
    let (mut render, _) = read_phase(&c, &render_keys, false)?;
    Ok((figures(&mut latest), figures(&mut render)))
}
