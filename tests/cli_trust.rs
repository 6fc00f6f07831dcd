//! What a user of `wink` relies on at the edges: a later put of a revision wins whatever the
//! clocks say, every input is read against its limit and refused there, an import manifest is
//! verified before anything is written, and the messages say what happened.

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use tempfile::TempDir;

mod common;
use common::cli::{s, wink_at, Run};

const D: &str = "en.wikipedia.org";
/// The clock of most commands.
const T: i64 = 1_700_000_000;

fn wink<S: AsRef<OsStr>>(args: &[S]) -> Run {
    wink_at(T, args, b"")
}

/// `wink ARGS` on the system clock (no WINK_NOW), with `stdin`.
fn wink_now<S: AsRef<OsStr>>(args: &[S], stdin: &[u8]) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_wink"))
        .args(args)
        .env_remove("WINK_NOW")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("wink runs");
    if let Some(mut pipe) = child.stdin.take() {
        use std::io::Write;
        let _ = pipe.write_all(stdin);
    }
    let out = child.wait_with_output().unwrap();
    Run {
        code: out.status.code().expect("exited, not killed"),
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A new store made by `wink init DIR OPTIONS...` in a new temporary directory.
fn new_store(options: &[&str]) -> (TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let mut args = vec!["init", s(&dir)];
    args.extend_from_slice(options);
    wink(&args).expect(0);
    (tmp, dir)
}

// ---- a later put wins ------------------------------------------------------------------------

#[test]
fn a_later_put_of_a_revision_wins() {
    let (_tmp, dir) = new_store(&[]);
    let d = s(&dir);
    for round in 0..20 {
        let rev = round.to_string();
        // The same whole second in every process (WINK_NOW), as scripts and tests run it.
        wink_at(T, &["put", d, D, "T", &rev], b"A\n").expect(0);
        wink_at(T, &["put", d, D, "T", &rev], b"B\n").expect(0);
        assert_eq!(
            wink(&["get", d, D, "T", &rev]).expect(0).stdout,
            b"B\n",
            "round {round}: the later put of one second"
        );
        if round >= 5 {
            continue;
        }
        // A clock that stepped back between the two processes.
        wink_at(T + 100, &["put", d, D, "U", &rev], b"A\n").expect(0);
        wink_at(T, &["put", d, D, "U", &rev], b"B\n").expect(0);
        assert_eq!(
            wink_at(T + 100, &["get", d, D, "U", &rev], b"")
                .expect(0)
                .stdout,
            b"B\n",
            "round {round}: the later put, on a clock behind the first"
        );
        // The system clock, at its full resolution.
        wink_now(&["put", d, D, "V", &rev], b"A\n").expect(0);
        wink_now(&["put", d, D, "V", &rev], b"B\n").expect(0);
        assert_eq!(
            wink_now(&["get", d, D, "V", &rev], b"").expect(0).stdout,
            b"B\n",
            "round {round}: the later put on the system clock"
        );
    }
}

// ---- bounded inputs --------------------------------------------------------------------------

/// `wink ARGS` with its address space limited to `bytes` (RLIMIT_AS): a command that read an
/// endless input whole would die of it instead of exiting.
fn wink_in(bytes: u64, args: &[&str]) -> Run {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wink"));
    cmd.args(args)
        .env("WINK_NOW", T.to_string())
        .stdin(Stdio::null());
    // SAFETY: setrlimit is async-signal-safe and changes only the child's own limit.
    unsafe {
        cmd.pre_exec(move || {
            let rl = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &rl) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let out = cmd.output().unwrap();
    Run {
        code: out.status.code().expect("exited, not killed"),
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `wink ARGS` fed an endless stream of zeros on stdin (up to `cap` bytes, then closed): how it
/// ended, and how many bytes it took before it closed its end of the pipe.
fn wink_fed(args: &[&str], cap: u64) -> (Run, u64) {
    use std::io::Write;
    let mut child = common::cli::spawn(args, T);
    let mut pipe = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        let chunk = vec![0u8; 64 << 10];
        let mut fed = 0u64;
        while fed < cap {
            match pipe.write(&chunk) {
                Ok(n) => fed += n as u64,
                Err(_) => break, // EPIPE: the command stopped reading.
            }
        }
        fed
    });
    let out = child.wait_with_output().unwrap();
    let fed = feeder.join().unwrap();
    let run = Run {
        code: out.status.code().expect("exited, not killed"),
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    (run, fed)
}

#[test]
fn every_input_is_refused_at_its_limit() {
    const MAX: u64 = 1_000_000;
    let (tmp, dir) = new_store(&["--max-value", &MAX.to_string()]);
    let d = s(&dir);
    let before = common::cli::snapshot(&dir);
    // A device that never ends, in an address space of 1 GiB.
    let run = wink_in(1 << 30, &["put", d, D, "Z", "1", "/dev/zero"]).expect(2);
    assert!(run.stderr.contains("maximum of 1000000"), "{}", run.stderr);
    // A pipe that never ends: the put stops reading just past the limit.
    let (run, fed) = wink_fed(&["put", d, D, "Z", "1"], 64 << 20);
    let run = run.expect(2);
    assert!(run.stderr.contains("stdin"), "{}", run.stderr);
    assert!(fed < MAX + (1 << 20), "{fed} bytes read before the refusal");
    // A regular file over the limit is refused by its length.
    let big = tmp.path().join("big");
    fs::File::create(&big).unwrap().set_len(MAX + 1).unwrap();
    wink(&["put", d, D, "Z", "1", s(&big)]).expect(2);
    assert_eq!(common::cli::snapshot(&dir), before, "nothing was written");
    // Exactly the limit is taken.
    fs::File::create(&big).unwrap().set_len(MAX).unwrap();
    wink(&["put", d, D, "Z", "1", s(&big)]).expect(0);

    // The format commands: one filesys data entry, 256 MiB.
    let base = tmp.path().join("fs");
    wink(&["fs", "create", s(&base)]).expect(0);
    let run = wink_in(1 << 30, &["fs", "put", s(&base), "zero", "/dev/zero"]).expect(2);
    assert!(run.stderr.contains("256 MiB"), "{}", run.stderr);
    let kv = tmp.path().join("t.kvseq");
    wink(&["kv", "create", s(&kv)]).expect(0);
    let (run, fed) = wink_fed(&["kv", "append", s(&kv), "k"], 512 << 20);
    run.expect(2);
    assert!(
        fed < (256 << 20) + (1 << 20),
        "{fed} bytes read before the refusal"
    );
}

// ---- import validation -----------------------------------------------------------------------

/// A corpus whose manifest has `good` (a valid document) on line 2 and `bad` on line 3; the
/// files are `good/0001.html` ("good") and `bad/0001.html` ("bad!").
fn corpus_with(src: &Path, bad: &[u8]) {
    for doc in ["good", "bad"] {
        fs::create_dir_all(src.join(doc)).unwrap();
    }
    fs::write(src.join("good/0001.html"), "good").unwrap();
    fs::write(src.join("bad/0001.html"), "bad!").unwrap();
    let mut manifest = b"doc\trev\ttimestamp\tbytes\tsha1\tsource\n\
        good\t0001\t1600000000\t4\t-\ttest\n"
        .to_vec();
    manifest.extend_from_slice(bad);
    manifest.push(b'\n');
    fs::write(src.join("manifest.tsv"), manifest).unwrap();
}

fn sha1_hex(bytes: &[u8]) -> String {
    use sha1::{Digest, Sha1};
    Sha1::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn import_verifies_every_line_before_writing() {
    let (tmp, dir) = new_store(&[]);
    let src = tmp.path().join("corpus");
    let right = sha1_hex(b"bad!");
    let wrong = sha1_hex(b"other");
    let long = format!("bad\t0001\t1600000000\t4\t-\t{}", "x".repeat(70_000));
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"bad\t0001\t999999999999999\t4\t-\tt".to_vec(), "timestamp"),
        (b"bad\t0001\t-5\t4\t-\tt".to_vec(), "timestamp"),
        (b"bad\t0001\t1600000000\t5\t-\tt".to_vec(), "bytes column"),
        (b"bad\t0001\t1600000000\t3\t-\tt".to_vec(), "bytes column"),
        (
            format!("bad\t0001\t1600000000\t4\t{wrong}\tt").into_bytes(),
            "SHA-1",
        ),
        (b"bad\t0001\t1600000000\t4\tnot-hex\tt".to_vec(), "sha1"),
        (b"bad\t0001\t1600000000\t4\t-\tcaf\xe9".to_vec(), "UTF-8"),
        (long.into_bytes(), "longer than"),
    ];
    let before = common::cli::snapshot(&dir);
    for (line, says) in &cases {
        corpus_with(&src, line);
        let run = wink(&["import", s(&dir), s(&src)]).expect(2);
        assert!(
            run.stderr.contains(says) && run.stderr.contains("line 3"),
            "{:?}: {}",
            String::from_utf8_lossy(line),
            run.stderr
        );
        assert_eq!(common::cli::snapshot(&dir), before, "nothing imported");
    }
    wink(&["get", s(&dir), "corpus", "good"]).expect(1);
    // The header line is read as strictly.
    corpus_with(&src, b"");
    let mut manifest = fs::read(src.join("manifest.tsv")).unwrap();
    manifest[0] = 0xff;
    fs::write(src.join("manifest.tsv"), manifest).unwrap();
    let run = wink(&["import", s(&dir), s(&src)]).expect(2);
    assert!(run.stderr.contains("line 1"), "{}", run.stderr);

    corpus_with(
        &src,
        format!("bad\t0001\t1600000000\t4\t{right}\tt").as_bytes(),
    );
    wink(&["import", s(&dir), s(&src)]).expect(0);
    assert_eq!(
        wink(&["get", s(&dir), "corpus", "bad"]).expect(0).stdout,
        b"bad!"
    );
}

// ---- messages --------------------------------------------------------------------------------

#[test]
fn messages_say_what_happened_once() {
    let (_tmp, dir) = new_store(&[]);
    let d = s(&dir);
    wink_at(T, &["put", d, D, "P", "1"], b"one").expect(0);

    // `recover` reports each repair once: on stdout, not again on stderr.
    fs::write(
        dir.join("generation.tmp"),
        b"a switch killed before its rename",
    )
    .unwrap();
    let run = wink(&["recover", d]).expect(0);
    let both = format!("{}{}", run.out(), run.stderr);
    assert_eq!(both.matches("generation.tmp").count(), 1, "{both}");
    assert!(run.out().starts_with("repaired: "), "{}", run.out());
    assert!(run.stderr.is_empty(), "{}", run.stderr);
    // Other writing verbs say it on stderr.
    fs::write(dir.join("generation.tmp"), b"again").unwrap();
    let run = wink_at(T, &["put", d, D, "P", "2"], b"two").expect(0);
    assert_eq!(
        run.stderr.matches("generation.tmp").count(),
        1,
        "{}",
        run.stderr
    );

    // A second writer is told which store is in use.
    let held = common::cli::hold_writer(&dir, T);
    let run = wink_at(T, &["put", d, D, "P", "3"], b"three").expect(4);
    assert!(
        run.stderr
            .starts_with(&format!("wink: {d}: in use by another writer")),
        "{}",
        run.stderr
    );
    drop(held);

    // `ls --limit 0` is a usage error, as `import --batch 0` is; `--limit 1` lists one.
    let run = wink(&["ls", d, D, "P", "--limit", "0"]).expect(2);
    assert!(run.stderr.contains("--limit 0"), "{}", run.stderr);
    assert_eq!(
        wink(&["ls", d, D, "P", "--limit", "1"])
            .expect(0)
            .out()
            .lines()
            .count(),
        1
    );
}
