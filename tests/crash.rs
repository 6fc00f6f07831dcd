//! Process crashes: a writer (this test binary, re-executed as `sigkill_plain_filesys` with
//! `WINK_CRASH_WRITER` set) is killed with SIGKILL at random moments;
//! reopening must recover, every file committed before the kill must be byte-exact, no file may
//! hold anything but its true content, and `check` must find the filesys clean.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use std::io::Write;

use wink::filesys::check::check_filesys;
use wink::filesys::{Filesys, FsOptions, OpenOptions};

const CHILD_ENV: &str = "WINK_CRASH_WRITER";
/// The test a re-executed copy of this binary runs: with `CHILD_ENV` set it is the writer instead.
/// A `#[test]` of the writer's own would pass, checking nothing, in every normal run.
const CHILD_HOST: &str = "sigkill_plain_filesys";

/// The content file `i` has after all its writes: deterministic, so the checker can recompute it.
fn content(seed: u64, i: u64) -> Vec<u8> {
    let len = ((seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15)) % 9000) as usize;
    (0..len).map(|k| (k as u64 ^ i ^ seed) as u8).collect()
}

/// The writer, in a copy of this binary run with `WINK_CRASH_WRITER=BASE,SEED,ao|plain`. Writes
/// files forever, committing every 7 and printing `synced N` once files `f/0..=N` are durable.
fn crash_writer(spec: &str) {
    let parts: Vec<&str> = spec.split(',').collect();
    let (base, seed, ao) = (
        PathBuf::from(parts[0]),
        parts[1].parse::<u64>().unwrap(),
        parts[2] == "ao",
    );
    let mut fs = if base.with_extension("data").exists() {
        Filesys::open(&base, &OpenOptions::writer()).unwrap()
    } else {
        let opts = FsOptions {
            ao,
            dups: ao,
            isz: 184,
            htsize: 8,
            fileincr: 1 << 16,
            ..FsOptions::default()
        };
        Filesys::create(&base, &opts, &OpenOptions::writer()).unwrap()
    };
    let start = fs.iter().count() as u64;
    let mut out = std::io::stdout();
    for i in start.. {
        let full = content(seed, i);
        // Three steps, so that in-place inode updates are in flight when the kill comes.
        let (a, rest) = full.split_at(full.len() / 3);
        let (b, c) = rest.split_at(rest.len() / 2);
        let name = format!("f/{i}");
        fs.put(name.as_bytes(), 0, a).unwrap();
        fs.append(name.as_bytes(), b).unwrap();
        fs.append(name.as_bytes(), c).unwrap();
        if i % 7 == 6 {
            fs.sync().unwrap();
            writeln!(out, "synced {i}")
                .and_then(|_| out.flush())
                .unwrap();
        }
    }
}

/// Runs the writer for `delay`, kills it, and returns the last index it reported synced.
fn run_and_kill(base: &Path, seed: u64, ao: bool, delay: Duration) -> Option<u64> {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", CHILD_HOST, "--nocapture", "--test-threads=1"]);
    cmd.env(
        CHILD_ENV,
        format!(
            "{},{seed},{}",
            base.display(),
            if ao { "ao" } else { "plain" }
        ),
    );
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut last = None;
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            last = line
                .strip_prefix("synced ")
                .and_then(|n| n.parse::<u64>().ok())
                .or(last);
        }
        last
    });
    let start = Instant::now();
    while start.elapsed() < delay {
        std::thread::sleep(Duration::from_millis(1));
    }
    // SIGKILL: no destructor, no flush, no chance to finish a write.
    child.kill().unwrap();
    child.wait().unwrap();
    reader.join().unwrap()
}

fn verify(base: &Path, seed: u64, synced: Option<u64>) {
    if synced.is_none() && !base.with_extension("data").exists() {
        // Killed inside create, before the datafile was renamed into place: no filesys yet.
        return;
    }
    let fs = Filesys::open(base, &OpenOptions::writer()).expect("a writer's open recovers");
    let mut present = 0;
    for stat in fs.iter() {
        let stat = stat.unwrap();
        let name = String::from_utf8(stat.name.clone()).unwrap();
        let i: u64 = name.strip_prefix("f/").unwrap().parse().unwrap();
        let got = fs.read(&stat.name).unwrap();
        let full = content(seed, i);
        // An uncommitted file may be missing or cut at a step boundary, never wrong.
        assert!(
            full.starts_with(&got),
            "{name}: content is not a prefix of the true content"
        );
        if synced.is_some_and(|s| i <= s) {
            assert_eq!(got, full, "{name} was committed but is not complete");
        }
        present += 1;
    }
    if let Some(s) = synced {
        assert!(
            present > s,
            "committed files missing: {present} present, {} committed",
            s + 1
        );
    }
    drop(fs);
    let report = check_filesys(base);
    assert!(report.problems.is_empty(), "{:#?}", report.problems);
}

fn crash_rounds(rounds: u64, ao: bool) {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("fs");
    let seed = 0x5EED ^ u64::from(ao);
    let mut rng = seed;
    let mut committed = None;
    for _ in 0..rounds {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let delay = Duration::from_millis(5 + rng % 60);
        let synced = run_and_kill(&base, seed, ao, delay);
        committed = synced.or(committed);
        verify(&base, seed, committed);
    }
    // The rounds must have written for real, or the test proves nothing.
    assert!(
        committed.is_some_and(|c| c >= rounds),
        "only {committed:?} files committed in {rounds} rounds"
    );
}

#[test]
fn sigkill_plain_filesys() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        crash_writer(&spec);
        return;
    }
    crash_rounds(30, false);
}

#[test]
fn sigkill_ao_filesys() {
    crash_rounds(30, true);
}

#[test]
#[ignore = "long run: cargo test --release --test crash -- --ignored"]
fn sigkill_long_run() {
    crash_rounds(500, false);
    crash_rounds(500, true);
}
