//! Power cuts under a single-node render store: the store's directory is on cutfs (a filesystem
//! that loses everything not fsynced; tools/cutfs), `wink put` runs in a loop, and at random
//! moments the power is cut (every unsynced byte and name lost, every process SIGKILLed), the
//! filesystem mounted again, and then:
//! - every put that `wink put` acknowledged (exit 0, its tid printed) reads back byte-exact, by
//!   revision and by tid, through `wink get` and through the library;
//! - the latest render of each title is the last acknowledged one, or a later put that was in
//!   flight at a cut;
//! - `wink check` finds the store clean, and the next `wink put` opens it as a writer.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::powercut::{self, PowerCut, Rng};
use uuid::Uuid;
use wink::store::Which;
use wink::store::{Store, StoreOptions};

const DOMAIN: &str = "en.wikipedia.org";
const TITLES: [&str; 4] = ["Alpha", "Beta_(letter)", "Gamma ray", "Delta/Sub"];
const CUTS: usize = 12;

#[derive(Clone, Debug)]
struct Put {
    title: &'static str,
    rev: u64,
    body: Vec<u8>,
}

#[derive(Clone, Debug)]
struct Ack {
    put: Put,
    tid: Uuid,
}

/// A render: mostly small, some large enough to span many pages and to fill containers.
fn body(rng: &mut Rng, title: &str, rev: u64) -> Vec<u8> {
    let len = match rng.below(10) {
        0 => 40_000 + rng.below(200_000),
        1..=3 => rng.below(200),
        _ => 200 + rng.below(6000),
    } as usize;
    let mut out = format!("<html><h1>{title} r{rev}</h1>").into_bytes();
    let salt = rng.next();
    out.extend((0..len).map(|i| (((i as u64).wrapping_mul(salt) >> 17) % 251) as u8));
    out
}

fn wink(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_wink"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    // A put killed by the cut stops reading its stdin: a broken pipe is expected then.
    let _ = input.write_all(stdin);
    drop(input);
    child.wait_with_output().unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Puts until the cut: returns the acknowledged puts and the one in flight when it came.
fn writer(
    dir: PathBuf,
    mut rng: Rng,
    mut next_rev: BTreeMap<&'static str, u64>,
    cutting: Arc<AtomicBool>,
) -> (Vec<Ack>, Option<Put>, BTreeMap<&'static str, u64>) {
    let mut acks = Vec::new();
    loop {
        let title = TITLES[rng.below(TITLES.len() as u64) as usize];
        let rev = next_rev[title];
        // Revisions grow with gaps, as a wiki's do.
        next_rev.insert(title, rev + 1 + rng.below(3));
        let put = Put {
            title,
            rev,
            body: body(&mut rng, title, rev),
        };
        let out = wink(
            &["put", s(&dir), DOMAIN, title, &rev.to_string(), "-"],
            &put.body,
        );
        if out.status.success() {
            let printed = String::from_utf8(out.stdout).unwrap();
            let tid = Uuid::parse_str(printed.trim())
                .unwrap_or_else(|e| panic!("put printed {printed:?}: {e}"));
            acks.push(Ack { put, tid });
            if cutting.load(Ordering::SeqCst) {
                return (acks, None, next_rev);
            }
        } else {
            // Only the cut may make a put fail.
            assert!(
                cutting.load(Ordering::SeqCst),
                "put failed with the power on: {:?} {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            return (acks, Some(put), next_rev);
        }
    }
}

/// What a reader finds after the cut.
fn verify(dir: &Path, acks: &[Ack], recent: &[Ack], flights: &[Put]) {
    let store = Store::open(dir, &StoreOptions::read_only())
        .unwrap_or_else(|e| panic!("the store does not open after the cut: {e}"));
    let mut latest: BTreeMap<&str, &Ack> = BTreeMap::new();
    for ack in acks {
        let p = &ack.put;
        let got = store
            .get(DOMAIN, p.title, Which::Render(p.rev, ack.tid))
            .unwrap_or_else(|e| panic!("{} r{} {}: {e}", p.title, p.rev, ack.tid))
            .unwrap_or_else(|| {
                panic!(
                    "acknowledged put lost: {} r{} {} ({} bytes)",
                    p.title,
                    p.rev,
                    ack.tid,
                    p.body.len()
                )
            });
        assert!(
            got.value == p.body,
            "{} r{} {}: wrong bytes",
            p.title,
            p.rev,
            ack.tid
        );
        let by_rev = store
            .get(DOMAIN, p.title, Which::Rev(p.rev))
            .unwrap()
            .unwrap();
        assert_eq!(
            by_rev.tid, ack.tid,
            "{} r{}: another render",
            p.title, p.rev
        );
        latest.insert(p.title, ack);
    }
    for title in TITLES {
        let got = store.get(DOMAIN, title, Which::Latest).unwrap();
        let acked = latest.get(title).map(|a| (a.put.rev, &a.put.body));
        let got = got.as_ref().map(|g| (g.rev, &g.value));
        // A put cut in flight may or may not have become durable.
        let flew = flights.iter().any(|p| {
            p.title == title
                && got == Some((p.rev, &p.body))
                && acked.is_none_or(|(rev, _)| p.rev > rev)
        });
        assert!(
            got == acked || flew,
            "{title}: latest is r{:?}, last acknowledged r{:?}",
            got.map(|g| g.0),
            acked.map(|a| a.0),
        );
    }
    drop(store);
    // The command line's reads of the puts acknowledged since the last cut.
    for ack in recent {
        let p = &ack.put;
        let rev = p.rev.to_string();
        let tid = ack.tid.to_string();
        for args in [
            vec!["get", s(dir), DOMAIN, p.title, &rev],
            vec!["get", s(dir), DOMAIN, p.title, &rev, &tid],
        ] {
            let out = wink(&args, b"");
            assert!(
                out.status.success(),
                "{args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(out.stdout == p.body, "{args:?}: wrong bytes");
        }
    }
    let check = wink(&["check", s(dir)], b"");
    assert!(
        check.status.success(),
        "check after the cut: {}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
}

#[test]
fn acknowledged_puts_survive_power_cuts() {
    if !powercut::available("power cuts under a store (tests/powercut_store.rs)") {
        return;
    }
    let seed = powercut::seed("a store under power cuts");
    let mut rng = Rng(seed);
    let tmp = tempfile::tempdir().unwrap();
    let mut pc = PowerCut::new(&tmp.path().join("backing"), &tmp.path().join("mnt"));
    let dir = pc.path().join("renders");
    let init = wink(
        &[
            "init",
            s(&dir),
            "--revisions",
            "all",
            "--renders",
            "all",
            "--container-bytes",
            "1048576",
        ],
        b"",
    );
    assert!(
        init.status.success(),
        "{}",
        String::from_utf8_lossy(&init.stderr)
    );
    // The store `init` acknowledged survives a cut at once.
    pc.remount();
    verify(&dir, &[], &[], &[]);

    let mut acks: Vec<Ack> = Vec::new();
    let mut next_rev: BTreeMap<&'static str, u64> = TITLES.iter().map(|t| (*t, 1)).collect();
    let mut flights: Vec<Put> = Vec::new();
    for cut in 0..CUTS {
        let cutting = Arc::new(AtomicBool::new(false));
        let handle = {
            let (dir, rng, next_rev, cutting) = (
                dir.clone(),
                Rng(rng.next()),
                next_rev.clone(),
                cutting.clone(),
            );
            thread::spawn(move || writer(dir, rng, next_rev, cutting))
        };
        // A random moment: early ones catch the writer's open and recovery, later ones puts.
        thread::sleep(Duration::from_millis(50 + rng.below(1200)));
        cutting.store(true, Ordering::SeqCst);
        let killed = pc.cut();
        let (recent, in_flight, revs) = handle.join().unwrap();
        next_rev = revs;
        eprintln!(
            "cut {cut}: {} puts acknowledged since the last, {} killed, in flight: {:?}",
            recent.len(),
            killed.len(),
            in_flight.as_ref().map(|p| (p.title, p.rev, p.body.len()))
        );
        pc.remount();
        acks.extend(recent.iter().cloned());
        flights.extend(in_flight);
        verify(&dir, &acks, &recent, &flights);
    }
    assert!(
        acks.len() >= CUTS,
        "too few puts acknowledged to prove much: {}",
        acks.len()
    );
    eprintln!(
        "{CUTS} cuts, {} puts acknowledged and read back, {} cut in flight",
        acks.len(),
        flights.len()
    );
    // The store opens as a writer again and takes a put.
    let out = wink(
        &["put", s(&dir), DOMAIN, "After", "1", "-"],
        b"<p>after</p>",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    pc.unmount();
}

/// A sync that fails under `wink serve` as Linux's after a writeback error (once, with EIO, the
/// file's unsynced bytes never reaching the disk, the next sync succeeding), at each fsync of a
/// put's commit in turn: that put answers 500 (no file named), the bucket's writer thread
/// reopens its store, the next put is acknowledged and read back, and after a power cut and a
/// restart every acknowledged put reads back byte for byte.
#[test]
fn a_failed_sync_under_a_server_answers_500_heals_and_loses_no_acknowledged_put() {
    use common::server::{agent, create_bucket, get, metric, put, Server};
    if !powercut::available("a failed sync under a server (tests/powercut_store.rs)") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut pc = PowerCut::new(&tmp.path().join("backing"), &tmp.path().join("mnt"));
    let root = pc.path().join("root");
    let args = ["--maintenance-interval", "0"];
    let s = Server::start(&root, &args);
    create_bucket(&s, "b", r#"{"renders":"all","revisions":"all"}"#);
    let ag = agent();
    let control = pc.control().expect("mounted");
    let body = |name: &str| {
        let mut v = format!("<html>{name}</html>").into_bytes();
        v.resize(3000 + name.len() * 97, b'x');
        v
    };
    // (title, its tid, its bytes) of every acknowledged put.
    let mut acked: Vec<(String, String, Vec<u8>)> = Vec::new();
    let mut put_new = |title: &str| {
        let a = put(
            &ag,
            &s.p("b", &format!("/{title}/1")),
            "text/html",
            &body(title),
        );
        (a.status == 201).then(|| {
            let tid = a.json()["tid"].as_str().unwrap().to_string();
            acked.push((title.to_string(), tid, body(title)));
        });
        a
    };
    // The fsyncs of a put's commit, counted on one like those failed below.
    let before = control.fsyncs();
    assert_eq!(put_new("Probe").status, 201);
    let syncs = control.fsyncs() - before;
    assert!(syncs >= 2, "{syncs}");
    for n in 1..=syncs {
        control.lose_writeback_at_fsync(n);
        let failed = put_new(&format!("Failed{n}"));
        let j = failed.problem(500, "server_error");
        let root_text = root.display().to_string();
        assert!(
            !j.to_string().contains(&root_text),
            "fsync {n} of {syncs}: {j}"
        );
        // Healed: the next put is acknowledged, and read back.
        let title = format!("After{n}");
        let a = put_new(&title);
        assert_eq!(
            a.status,
            201,
            "fsync {n} of {syncs}: {}",
            String::from_utf8_lossy(&a.body)
        );
        let got = get(&ag, &s.p("b", &format!("/{title}/1")));
        assert_eq!(
            (got.status, got.body),
            (200, body(&title)),
            "fsync {n} of {syncs}"
        );
    }
    assert_eq!(
        metric(&s, r#"wink_writer_reopens_total{bucket="b"}"#),
        syncs
    );
    pc.cut();
    drop(s);
    pc.remount();
    let s = Server::start(&root, &args);
    for (title, tid, bytes) in &acked {
        let got = get(&ag, &s.p("b", &format!("/{title}/1/{tid}")));
        assert_eq!(got.status, 200, "acknowledged {title}");
        assert!(got.body == *bytes, "acknowledged {title} differs");
    }
    for n in 1..=syncs {
        let got = get(&ag, &s.p("b", &format!("/Failed{n}/1")));
        assert!(
            got.status == 404 || got.body == body(&format!("Failed{n}")),
            "Failed{n}"
        );
    }
}
