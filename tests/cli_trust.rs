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
