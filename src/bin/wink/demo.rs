//! `wink demo [--dir DIR] [--pages N] [--revisions N]`: the render store end to end on a fresh
//! machine, with no data but what it generates.
//!
//! The demo is a sequence of steps over one shared state ([`Demo`]); each step prints one line
//! (and maybe a few indented ones) and records any verification failure instead of stopping, so
//! that one run shows everything that is wrong. Later steps (compaction) slot into [`STEPS`].
//!
//! The demo runs on its own manual clock, starting at WINK_NOW (or the system's time): the
//! archive step moves it past the recent window instead of waiting.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use uuid::Uuid;
use wink::clock::{Clock, ManualClock};
use wink::maintenance;
use wink::store::check::check_store;
use wink::store::policy::ArchivePolicy;
use wink::store::Which;
use wink::store::{key, Config, Page, Put, Revisions, State, Store, StoreOptions};
use wink::{Error, Result};
use wink_harness::synth::{histories, Revision};

use crate::show::Out;
use crate::Status;

const AFTER_HELP: &str = "\
Generates deterministic revision histories of PAGES wiki-like pages (REVISIONS revisions each,
every revision a complete HTML page with a few edits), stores them in a new store in batches,
reads the latest render of every page and every revision of some pages (by number and by tid)
back and compares the bytes with what was generated, and lists one page. Then it moves its clock
past the recent window, so that every revision but the current one of each page leaves the hot
tier, archives them (the store has an archive keeping the newest render of each revision), and
reads the same revisions back again, now from the archive (state archived). It checks the whole
store, and prints what it measured: puts/s, MB/s (10^6 bytes), the get_latest latency, archiving
MB/s, the archive's size as a % of the raw bytes it holds, the latency of reading one archived
revision with the archive's block cache empty (the OS page cache is not dropped), raw bytes and
bytes on disk (the sum of the store's file sizes, preallocation included).

The store goes to a new temporary directory that is removed at the end, or to --dir (created like
`wink init DIR --archive newest`, and kept). The clock starts at WINK_NOW when set, else at the
system's time, and stands still but for the archive step's jump of the recent TTL plus 1 s. Exit
status 1 when a verification fails (the temporary store is then kept for inspection), 2 for bad
options.";

/// The domain of the generated pages.
const DOMAIN: &str = "demo.wikipedia.org";
const CONTENT_TYPE: &str = "text/html; charset=utf-8";
/// Seed of the histories: every run generates the same bytes.
const SEED: u64 = 2024;
/// Paragraphs per article (about 1 KB each rendered).
const PARAGRAPHS: usize = 24;
/// Puts per commit.
const BATCH: usize = 500;
/// Containers are kept small so that the demo's store has several, as a large one would; just
/// under the containers' 16 MiB preallocation step, so that a sealed container's file is not
/// mostly preallocated room.
const CONTAINER_BYTES: u64 = 15 << 20;
/// Every this many pages, every revision is read back by number and by tid.
const SAMPLE_EVERY: usize = 10;
/// Upper bounds that keep the demo's memory and time reasonable (it holds one rendered page per
/// page, and every revision of one page in ten).
const MAX_PAGES: usize = 100_000;
const MAX_REVISIONS: usize = 1_000;

/// Runs the render store end to end on generated pages.
#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// Put the store here (created like `wink init DIR --archive newest`, and kept) instead of a
    /// temporary directory.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// How many pages to generate.
    #[arg(long, value_name = "N", default_value_t = 300)]
    pages: usize,
    /// How many revisions each page gets.
    #[arg(long, value_name = "N", default_value_t = 12)]
    revisions: usize,
}

/// One generated render the demo remembers, to compare with what the store returns.
#[derive(Clone)]
struct Expected {
    title: String,
    rev: u64,
    tid: Uuid,
    html: Vec<u8>,
}

/// The state the steps share.
struct Demo {
    out: Out,
    store: Store,
    /// The store's clock, which the archive step moves on.
    clock: ManualClock,
    dir: PathBuf,
    pages: usize,
    revisions: usize,
    /// The latest render of every page.
    latest: Vec<Expected>,
    /// Every render of every SAMPLE_EVERY-th page.
    sampled: Vec<Expected>,
    raw_bytes: u64,
    renders: u64,
    put_time: Duration,
    latencies: Vec<Duration>,
    /// What the archive step moved out of the hot tier: revisions and their raw bytes.
    archived: u64,
    archived_bytes: u64,
    failures: Vec<String>,
}

/// One step: its name, and what it does.
struct Step {
    name: &'static str,
    run: fn(&mut Demo) -> Result<()>,
}

const STEPS: &[Step] = &[
    Step {
        name: "store",
        run: store_histories,
    },
    Step {
        name: "read",
        run: read_back,
    },
    Step {
        name: "list",
        run: list_one,
    },
    Step {
        name: "archive",
        run: archive,
    },
    Step {
        name: "compact",
        run: compact,
    },
    Step {
        name: "check",
        run: check,
    },
    Step {
        name: "summary",
        run: summary,
    },
];

pub fn run(args: &Args) -> Result<Status> {
    check_args(args)?;
    let clock = crate::clock_from_env()?;
    let (dir, temporary) = match &args.dir {
        Some(dir) => {
            crate::store::init::refuse_existing(dir)?;
            (dir.clone(), false)
        }
        None => (temp_dir()?, true),
    };
    let mut demo = match start(args, &dir, clock) {
        Ok(demo) => demo,
        Err(e) => {
            if temporary {
                remove(&dir);
            }
            return Err(e);
        }
    };
    let result = run_steps(&mut demo);
    let failed = result.is_err() || !demo.failures.is_empty();
    for failure in &demo.failures {
        eprintln!("wink: demo: {failure}");
    }
    drop(demo);
    if temporary && !failed {
        remove(&dir);
    } else if temporary {
        eprintln!(
            "wink: demo: the store is kept in {} for inspection",
            dir.display()
        );
    }
    result?;
    Ok(if failed { 1 } else { 0 })
}

fn check_args(args: &Args) -> Result<()> {
    if !(1..=MAX_PAGES).contains(&args.pages) {
        return Err(Error::invalid(format!(
            "--pages {}: 1..={MAX_PAGES}",
            args.pages
        )));
    }
    if !(1..=MAX_REVISIONS).contains(&args.revisions) {
        return Err(Error::invalid(format!(
            "--revisions {}: 1..={MAX_REVISIONS}",
            args.revisions
        )));
    }
    Ok(())
}

/// A new, private directory under the system's temporary directory.
fn temp_dir() -> Result<PathBuf> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir = std::env::temp_dir().join(format!("wink-demo-{}-{nanos}", std::process::id()));
    std::fs::create_dir(&dir).map_err(|e| Error::io(&dir, None, e))?;
    Ok(dir)
}

fn remove(dir: &Path) {
    if let Err(e) = std::fs::remove_dir_all(dir) {
        eprintln!("wink: demo: could not remove {}: {e}", dir.display());
    }
}

/// Creates the store, with an archive, and opens it for writing on a manual clock that starts
/// at `clock`'s now.
fn start(args: &Args, dir: &Path, clock: std::sync::Arc<dyn Clock>) -> Result<Demo> {
    let clock = ManualClock::new(clock.now());
    let opts = StoreOptions {
        clock: std::sync::Arc::new(clock.clone()),
        ..StoreOptions::writer()
    };
    let cfg = Config {
        container_bytes: CONTAINER_BYTES,
        archive: Some(ArchivePolicy::Newest),
        ..Config::default()
    };
    Store::init(dir, &cfg, &opts)?;
    let store = Store::open(dir, &opts)?;
    let mut out = Out::new();
    out.line(&format!(
        "wink demo: {} pages × {} revisions, store in {} (policy: revisions {}, renders {}, \
            archive {})",
        args.pages,
        args.revisions,
        dir.display(),
        cfg.policy.revisions,
        cfg.policy.renders,
        ArchivePolicy::Newest,
    ))?;
    Ok(Demo {
        out,
        store,
        clock,
        dir: dir.to_path_buf(),
        pages: args.pages,
        revisions: args.revisions,
        latest: Vec::with_capacity(args.pages),
        sampled: Vec::new(),
        raw_bytes: 0,
        renders: 0,
        put_time: Duration::ZERO,
        latencies: Vec::with_capacity(args.pages),
        archived: 0,
        archived_bytes: 0,
        failures: Vec::new(),
    })
}

fn run_steps(demo: &mut Demo) -> Result<()> {
    for (i, step) in STEPS.iter().enumerate() {
        demo.out
            .line(&format!("[{}/{}] {}", i + 1, STEPS.len(), step.name))?;
        (step.run)(demo)?;
    }
    demo.out.line(if demo.failures.is_empty() {
        "all verifications passed"
    } else {
        "VERIFICATION FAILED (details on stderr)"
    })?;
    Ok(())
}

/// A page's own tid node, so that tids of different pages never collide (multicast bit set, as
/// RFC 9562 asks of a node that is not a MAC address).
fn node(page: usize) -> [u8; 6] {
    let mut node = [0u8; 6];
    node[2..].copy_from_slice(&(page as u32).to_be_bytes());
    node[0] = 0x01;
    node
}

/// Generates the histories page by page and stores them in batches of BATCH puts; only the
/// store's work is timed, not the generation.
fn store_histories(demo: &mut Demo) -> Result<()> {
    let mut pending: Vec<Expected> = Vec::with_capacity(BATCH);
    let (mut page, mut last_title) = (0usize, String::new());
    let mut batches = 0u64;
    for rev in histories(SEED, demo.pages, demo.revisions, PARAGRAPHS) {
        if !last_title.is_empty() && rev.title != last_title {
            page += 1;
        }
        last_title.clone_from(&rev.title);
        pending.push(expected(&rev, page));
        if pending.len() == BATCH {
            put_batch(demo, &mut pending)?;
            batches += 1;
        }
    }
    if !pending.is_empty() {
        put_batch(demo, &mut pending)?;
        batches += 1;
    }
    let secs = demo.put_time.as_secs_f64().max(1e-9);
    demo.out.line(&format!(
        "  {} renders of {} pages, {} in {batches} batches of up to {BATCH}: {:.2} s, {:.0} \
            puts/s, {:.1} MB/s",
        demo.renders,
        demo.pages,
        mb(demo.raw_bytes),
        secs,
        demo.renders as f64 / secs,
        demo.raw_bytes as f64 / 1e6 / secs
    ))
}

fn expected(rev: &Revision, page: usize) -> Expected {
    Expected {
        title: rev.title.clone(),
        rev: rev.rev,
        tid: key::tid_at(rev.timestamp, (rev.rev & 0x3fff) as u16, node(page)),
        html: rev.html.clone(),
    }
}

/// Puts and commits one batch, then keeps what the reads will compare against.
fn put_batch(demo: &mut Demo, pending: &mut Vec<Expected>) -> Result<()> {
    let started = Instant::now();
    let mut batch = demo.store.batch();
    for e in pending.iter() {
        batch.put(&Put {
            domain: DOMAIN,
            title: &e.title,
            rev: e.rev,
            tid: Some(e.tid),
            content_type: CONTENT_TYPE,
            labels: &wink::store::Labels::NONE,
            value: &e.html,
            historical: false,
        })?;
    }
    batch.commit()?;
    demo.put_time += started.elapsed();
    for e in pending.drain(..) {
        demo.renders += 1;
        demo.raw_bytes += e.html.len() as u64;
        let page = page_number(&e.title);
        if page % SAMPLE_EVERY == 0 {
            demo.sampled.push(e.clone());
        }
        match demo.latest.last_mut() {
            Some(last) if last.title == e.title => *last = e,
            _ => demo.latest.push(e),
        }
    }
    Ok(())
}

/// The page number in a generated title ("Page 17").
fn page_number(title: &str) -> usize {
    title
        .rsplit(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Reads back the latest render of every page (timed), and every render of the sampled pages by
/// revision and by tid, comparing revision, tid and bytes with what was generated.
fn read_back(demo: &mut Demo) -> Result<()> {
    for i in 0..demo.latest.len() {
        let e = &demo.latest[i];
        let started = Instant::now();
        let got = demo.store.get(DOMAIN, &e.title, Which::Latest)?;
        demo.latencies.push(started.elapsed());
        let failure = compare("latest", e, got.as_ref().map(|g| (g.rev, g.tid, &g.value)));
        demo.failures.extend(failure);
    }
    let mut by_rev = 0;
    for e in &demo.sampled {
        let got = demo.store.get(DOMAIN, &e.title, Which::Rev(e.rev))?;
        let failure = compare(
            "by revision",
            e,
            got.as_ref().map(|g| (g.rev, g.tid, &g.value)),
        );
        let got = demo
            .store
            .get(DOMAIN, &e.title, Which::Render(e.rev, e.tid))?;
        let failure = failure.or(compare(
            "by tid",
            e,
            got.as_ref().map(|g| (g.rev, g.tid, &g.value)),
        ));
        demo.failures.extend(failure);
        by_rev += 1;
    }
    let absent = demo.store.get(DOMAIN, "Page 0", Which::Rev(1))?;
    if absent.is_some() {
        demo.failures
            .push("a revision never stored (1) was found".to_string());
    }
    let (p50, p99) = (
        percentile(&demo.latencies, 50),
        percentile(&demo.latencies, 99),
    );
    demo.out.line(&format!(
        "  latest of {} pages, and {by_rev} renders of {} pages by revision and by tid: {}",
        demo.latest.len(),
        demo.pages.div_ceil(SAMPLE_EVERY),
        if demo.failures.is_empty() {
            "every byte as generated"
        } else {
            "MISMATCHES"
        }
    ))?;
    demo.out.line(&format!(
        "  get_latest: p50 {} µs, p99 {} µs",
        p50.as_micros(),
        p99.as_micros()
    ))
}

/// A failure when the render read is not the one generated.
fn compare(how: &str, e: &Expected, got: Option<(u64, Uuid, &Vec<u8>)>) -> Option<String> {
    let what = format!("{} revision {} ({how})", e.title, e.rev);
    match got {
        None => Some(format!("{what}: not found")),
        Some((rev, tid, _)) if rev != e.rev || tid != e.tid => Some(format!(
            "{what}: got revision {rev} tid {tid}, expected tid {}",
            e.tid
        )),
        Some((_, _, bytes)) if *bytes != e.html => Some(format!(
            "{what}: {} bytes differ from the {} generated",
            bytes.len(),
            e.html.len()
        )),
        Some(_) => None,
    }
}

fn percentile(samples: &[Duration], pct: usize) -> Duration {
    let mut v = samples.to_vec();
    v.sort_unstable();
    match v.len() {
        0 => Duration::ZERO,
        n => v[(n - 1) * pct / 100],
    }
}

/// Lists the first page, and checks the listing: every revision, newest first, the newest
/// current and the others recent.
fn list_one(demo: &mut Demo) -> Result<()> {
    let title = "Page 0";
    let listed = demo.store.list(DOMAIN, title, Page::default())?;
    demo.out.line(&format!(
        "  {DOMAIN}/{title}: {} renders, newest first",
        listed.len()
    ))?;
    for l in &listed {
        demo.out.line(&format!(
            "    {}\t{}\t{}\t{}",
            l.rev,
            l.tid,
            l.size,
            l.state.as_str()
        ))?;
    }
    let newest_first = listed.windows(2).all(|w| w[0].rev > w[1].rev);
    let states_ok = listed.iter().enumerate().all(|(i, l)| {
        l.state
            == if i == 0 {
                State::Current
            } else {
                State::Recent
            }
    });
    if listed.len() != demo.revisions || !newest_first || !states_ok {
        demo.failures.push(format!(
            "{title}: the listing is not {} renders newest first, the first current",
            demo.revisions
        ));
    }
    Ok(())
}

/// Moves the clock past the recent window, so that every revision but the current one of each
/// page leaves the hot tier, and archives them (timed). Then reads every render of the sampled
/// pages back by revision and by tid — the old ones from the archive, with its block cache emptied
/// before each (timed), the latest from the hot tier — and checks states, a listing and that a
/// rerun finds nothing to do.
fn archive(demo: &mut Demo) -> Result<()> {
    let Revisions::Recent { ttl } = demo.store.config().policy.revisions else {
        return Err(Error::invalid(
            "the demo's store keeps every revision: none would leave the hot tier",
        ));
    };
    demo.clock
        .set(demo.clock.now().saturating_add(ttl).saturating_add(1));
    let started = Instant::now();
    let report = maintenance::archive_due(&mut demo.store, |_, _| {})?;
    let secs = started.elapsed().as_secs_f64().max(1e-9);
    demo.archived = report.revisions;
    demo.archived_bytes = report.bytes;
    let latest_bytes: u64 = demo.latest.iter().map(|e| e.html.len() as u64).sum();
    let due = demo.renders - demo.latest.len() as u64;
    if (report.revisions, report.bytes) != (due, demo.raw_bytes - latest_bytes) {
        demo.failures.push(format!(
            "archive run: {} revisions of {} bytes archived; {due} of {} had left the hot tier",
            report.revisions,
            report.bytes,
            demo.raw_bytes - latest_bytes
        ));
    }
    let times = read_archived(demo)?;
    list_archived(demo)?;
    if maintenance::archive_due(&mut demo.store, |_, _| {})?.revisions != 0 {
        demo.failures
            .push("a second archive run archived something".to_string());
    }
    let st = demo
        .store
        .archive()
        .ok_or_else(|| Error::invalid("the demo's store has no archive"))?
        .stats()?;
    demo.out.line(&format!(
        "  clock +{ttl} s: {} revisions of {} pages left the hot tier, {} archived in {secs:.2} s, \
            {:.1} MB/s",
        report.revisions,
        report.titles,
        mb(report.bytes),
        report.bytes as f64 / 1e6 / secs
    ))?;
    demo.out.line(&format!(
        "  archive: {} revisions in {} blocks, raw {}, stored {} = {} of raw",
        st.revisions,
        st.blocks,
        mb(st.raw_bytes),
        mb(st.stored_bytes),
        percent(st.stored_bytes, st.raw_bytes)
    ))?;
    demo.out.line(&format!(
        "  {} archived renders of {} pages read back by revision and by tid: {}",
        times.len(),
        demo.pages.div_ceil(SAMPLE_EVERY),
        if demo.failures.is_empty() {
            "every byte as generated, state archived"
        } else {
            "MISMATCHES"
        }
    ))?;
    demo.out.line(&format!(
        "  archived get_rev, block cache empty (page cache warm): p50 {} µs, p99 {} µs",
        percentile(&times, 50).as_micros(),
        percentile(&times, 99).as_micros()
    ))
}

/// Compacts the store: the archived values left in the containers are dropped, the latest
/// renders copied; every latest render must read back as generated afterwards.
fn compact(demo: &mut Demo) -> Result<()> {
    let before = demo.store.stat()?;
    let started = Instant::now();
    let report = maintenance::compact(
        &mut demo.store,
        &wink::maintenance::compact::CompactOptions::default(),
        |_, _| {},
    )?;
    let secs = started.elapsed().as_secs_f64().max(1e-9);
    let after = demo.store.stat()?;
    let dropped: Vec<String> = report
        .dropped()
        .iter()
        .map(|(reason, t)| format!("{} {} ({})", t.values, reason.as_str(), mb(t.bytes)))
        .collect();
    demo.out.line(&format!(
        "  dropped {}; containers {} → {}, reclaimed {} in {secs:.2} s, generation {}",
        if dropped.is_empty() {
            "nothing".to_string()
        } else {
            dropped.join(", ")
        },
        mb(before.container_bytes),
        mb(after.container_bytes),
        mb(report.reclaimed()),
        report.generation_after
    ))?;
    let mut mismatches = 0;
    for e in &demo.latest {
        let got = demo.store.get(DOMAIN, &e.title, Which::Latest)?;
        if let Some(failure) = compare(
            "latest after compaction",
            e,
            got.as_ref().map(|g| (g.rev, g.tid, &g.value)),
        ) {
            demo.failures.push(failure);
            mismatches += 1;
        }
    }
    if after.live_bytes != before.live_bytes {
        demo.failures.push(format!(
            "compaction changed the live bytes: {} → {}",
            before.live_bytes, after.live_bytes
        ));
    }
    demo.out.line(&format!(
        "  {} latest renders read back after compaction: {}",
        demo.latest.len(),
        if mismatches == 0 {
            "every byte as generated"
        } else {
            "MISMATCHES"
        }
    ))
}

/// Reads every sampled render back by revision (timed, after emptying the archive's block
/// cache) and by tid; all but each page's latest must come from the archive. Returns the times
/// of the archived reads by revision.
fn read_archived(demo: &mut Demo) -> Result<Vec<Duration>> {
    let archive = demo
        .store
        .archive()
        .ok_or_else(|| Error::invalid("the demo's store has no archive"))?;
    let mut times = Vec::with_capacity(demo.sampled.len());
    for e in &demo.sampled {
        let latest = demo
            .latest
            .iter()
            .any(|l| l.title == e.title && l.rev == e.rev);
        let want = if latest {
            State::Current
        } else {
            State::Archived
        };
        archive.clear_cache();
        let started = Instant::now();
        let got = demo.store.get(DOMAIN, &e.title, Which::Rev(e.rev))?;
        if !latest {
            times.push(started.elapsed());
        }
        let by_rev = got.as_ref().map(|g| (g.rev, g.tid, &g.value));
        let mut failure = compare("by revision, after archiving", e, by_rev);
        if let Some(g) = got.filter(|g| g.state != want) {
            failure = failure.or(Some(format!(
                "{} revision {}: state {}, expected {}",
                e.title,
                e.rev,
                g.state.as_str(),
                want.as_str()
            )));
        }
        let got = demo
            .store
            .get(DOMAIN, &e.title, Which::Render(e.rev, e.tid))?;
        let by_tid = got.as_ref().map(|g| (g.rev, g.tid, &g.value));
        demo.failures
            .extend(failure.or(compare("by tid, after archiving", e, by_tid)));
    }
    Ok(times)
}

/// The first page's listing after archiving: every revision, newest first, the newest current
/// and the others archived.
fn list_archived(demo: &mut Demo) -> Result<()> {
    let title = "Page 0";
    let listed = demo.store.list(DOMAIN, title, Page::default())?;
    let states_ok = listed.iter().enumerate().all(|(i, l)| {
        l.state
            == if i == 0 {
                State::Current
            } else {
                State::Archived
            }
    });
    if listed.len() != demo.revisions || !states_ok {
        demo.failures.push(format!(
            "{title} after archiving: not {} renders, the first current and the rest archived",
            demo.revisions
        ));
    }
    Ok(())
}

/// `part` as a percentage of `whole`.
fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".to_string()
    } else {
        format!("{:.2}%", 100.0 * part as f64 / whole as f64)
    }
}

/// Checks the whole store's structure, as `wink check DIR` does.
fn check(demo: &mut Demo) -> Result<()> {
    demo.store.batch().commit()?;
    let report = check_store(&demo.dir);
    for problem in &report.problems {
        demo.failures.push(format!("check: {problem}"));
    }
    let verdict = if report.is_clean(true) {
        "ok"
    } else {
        "PROBLEMS"
    };
    demo.out.line(&format!("  {verdict}: {}", report.summary))
}

/// Sizes and rates.
fn summary(demo: &mut Demo) -> Result<()> {
    let stat = demo.store.stat()?;
    let on_disk = dir_bytes(&demo.dir)?;
    demo.out.line(&format!(
        "  raw {}, on disk {} ({:.2}× raw; the store's files, preallocated room included)",
        mb(demo.raw_bytes),
        mb(on_disk),
        on_disk as f64 / demo.raw_bytes.max(1) as f64,
    ))?;
    let archive = stat.archive.clone().unwrap_or_default();
    demo.out.line(&format!(
        "  {} containers holding {} of entries ({} of them live values), an archive of {}, plus \
         indexes and the title records",
        stat.containers,
        mb(stat.container_bytes),
        mb(stat.live_bytes),
        mb(archive.stored_bytes),
    ))?;
    let hot_and_archived = (
        stat.renders + archive.revisions,
        stat.live_bytes + archive.raw_bytes,
    );
    if hot_and_archived != (demo.renders, demo.raw_bytes)
        || (archive.revisions, archive.raw_bytes) != (demo.archived, demo.archived_bytes)
    {
        demo.failures.push(format!(
            "stat counts {} hot renders of {} bytes and {} archived of {}; {} of {} were stored, \
             {} of {} archived",
            stat.renders,
            stat.live_bytes,
            archive.revisions,
            archive.raw_bytes,
            demo.renders,
            demo.raw_bytes,
            demo.archived,
            demo.archived_bytes
        ));
    }
    Ok(())
}

/// The sum of the sizes of the files in `dir`.
fn dir_bytes(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, None, e))? {
        let entry = entry.map_err(|e| Error::io(dir, None, e))?;
        let meta = entry
            .metadata()
            .map_err(|e| Error::io(&entry.path(), None, e))?;
        if meta.is_file() {
            total += meta.len();
        }
    }
    Ok(total)
}

fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}
