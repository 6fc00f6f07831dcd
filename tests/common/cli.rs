//! Running the built `wink` binary: one run's exit code and output, the checks the CLI tests make
//! of them, and the small file helpers those tests share.
// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt::Display;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use serde_json::Value;
use wink::clock::ManualClock;
use wink::store::{Store, StoreOptions};

/// What one run of `wink` gave.
pub struct Run {
    pub code: i32,
    pub stdout: Vec<u8>,
    pub stderr: String,
}

impl Run {
    pub fn out(&self) -> String {
        String::from_utf8(self.stdout.clone()).expect("UTF-8 stdout")
    }

    /// Asserts that stdout is UTF-8.
    pub fn utf8(self) -> Run {
        self.out();
        self
    }

    /// Asserts the exit code and, for a failure, the one-line `wink: ` message.
    pub fn expect(self, code: i32) -> Run {
        let run = self.expect_code(code);
        if code != 0 {
            assert!(run.stderr.starts_with("wink: "), "{:?}", run.stderr);
            assert_eq!(run.stderr.lines().count(), 1, "{:?}", run.stderr);
        }
        run
    }

    /// Asserts the exit code alone: for an exit that promises no one-line message (exit 1 of
    /// the file and filesys commands, a finding such as not found), whose stderr the test
    /// checks itself where it matters.
    pub fn expect_code(self, code: i32) -> Run {
        assert_eq!(
            self.code,
            code,
            "stdout: {}\nstderr: {}",
            String::from_utf8_lossy(&self.stdout),
            self.stderr
        );
        self
    }

    /// Stdout as one JSON value.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.out()).expect("one JSON value")
    }

    /// Stdout as JSON lines.
    pub fn json_lines(&self) -> Vec<Value> {
        self.out()
            .lines()
            .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
            .collect()
    }

    /// The `FIELD<TAB>VALUE` lines of a text summary.
    pub fn fields(&self) -> BTreeMap<String, String> {
        self.out()
            .lines()
            .map(|l| {
                let (k, v) = l.split_once('\t').expect("FIELD<TAB>VALUE");
                (k.to_string(), v.to_string())
            })
            .collect()
    }

    /// The `FIELD<TAB>VALUE` lines of a text summary whose values are all numbers.
    pub fn numbers(&self) -> BTreeMap<String, u64> {
        self.out()
            .lines()
            .map(|l| {
                let (k, v) = l.split_once('\t').expect("FIELD<TAB>VALUE");
                (k.to_string(), v.parse().expect("a number"))
            })
            .collect()
    }
}

/// Starts `wink ARGS` with WINK_NOW set to `now` (a number, or any text for the tests of a bad
/// one), stdin a pipe, stdout and stderr captured.
pub fn spawn<S: AsRef<OsStr>>(args: &[S], now: impl Display) -> Child {
    Command::new(env!("CARGO_BIN_EXE_wink"))
        .args(args)
        .env("WINK_NOW", now.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("wink runs")
}

/// Writes `stdin` to the child (unless its stdin was taken already), closes it, and waits.
pub fn finish(mut child: Child, stdin: &[u8]) -> Run {
    if let Some(mut pipe) = child.stdin.take() {
        // A command that fails before reading its input closes the pipe: not our failure.
        let _ = pipe.write_all(stdin);
    }
    let out = child.wait_with_output().unwrap();
    Run {
        code: out.status.code().expect("exited, not killed"),
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `wink ARGS` at time `now` with `stdin`.
pub fn wink_at<S: AsRef<OsStr>>(now: impl Display, args: &[S], stdin: &[u8]) -> Run {
    finish(spawn(args, now), stdin)
}

/// `wink ARGS` at `now` (a command given `--wait`) while `held` holds the lock it needs: asserts
/// that it still waits after 300 ms, then drops `held` and returns how the command ended.
pub fn waits_for_lock<S: AsRef<OsStr>, H>(args: &[S], now: impl Display, held: H) -> Run {
    let mut waiting = spawn(args, now);
    drop(waiting.stdin.take());
    thread::sleep(Duration::from_millis(300));
    assert!(
        waiting.try_wait().unwrap().is_none(),
        "--wait returned while the lock was held"
    );
    drop(held);
    finish(waiting, b"")
}

/// The store's writer at time `now`, held by the test so that a command finds the store in use.
pub fn hold_writer(dir: &Path, now: i64) -> Store {
    let options = StoreOptions {
        clock: Arc::new(ManualClock::new(now)),
        ..StoreOptions::writer()
    };
    Store::open(dir, &options).unwrap()
}

/// Whether file(1) is installed; when not, the magic test is skipped (a failure in CI).
pub fn file_command_installed() -> bool {
    super::require::tool("file", "--version", "the magic test")
}

/// What the real file(1) says of `path` (`-b`) with the project's magic, magic/wink.
pub fn file_magic(path: &Path) -> String {
    let magic = Path::new(env!("CARGO_MANIFEST_DIR")).join("magic/wink");
    let out = Command::new("file")
        .arg("-b")
        .arg("-m")
        .arg(&magic)
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

pub fn bytes_at(path: &Path, at: u64, n: usize) -> Vec<u8> {
    fs::read(path).unwrap()[at as usize..at as usize + n].to_vec()
}

pub fn patch(path: &Path, at: u64, bytes: &[u8]) {
    let mut data = fs::read(path).unwrap();
    data[at as usize..at as usize + bytes.len()].copy_from_slice(bytes);
    fs::write(path, data).unwrap();
}

/// The bytes of every file in a directory, to show that a refused command changed nothing.
pub fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let path = e.unwrap().path();
            let bytes = fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect()
}
