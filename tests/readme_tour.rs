//! The README's CLI tour, run as written: its ```sh blocks, in order, as one `bash -euo pipefail`
//! script, from the checkout (as the README says to run it), with the built `wink` first on the
//! PATH and TMPDIR a fresh directory, so that the tour's `mktemp -d` lands in it. Every command
//! must succeed; one that is meant to fail says so in the script (`|| test $? -eq 1`). A README
//! that drifts from the CLI fails here.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::thread;
use std::time::{Duration, Instant};

mod common;
use common::require;

const README: &str = include_str!("../README.md");

/// Far above the few seconds the tour takes on a loaded machine; past it the tour has hung (a
/// server that never said where it listens, say).
const TIMEOUT: Duration = Duration::from_secs(300);

/// Before the tour. `cargo install --path .` would build and install a second `wink`; the binary
/// under test, first on the PATH, stands in for it, and anything else asked of cargo is a tour
/// this test does not know how to run. The trap names the command that stopped the tour.
const PRELUDE: &str = r#"cargo() {
  [ "$*" = "install --path ." ] || { echo "readme_tour: cannot run: cargo $*" >&2; return 2; }
}
trap 'echo "readme_tour: the tour stopped at: $BASH_COMMAND (exit $?)" >&2' ERR
"#;

/// The ```sh blocks of the README's "A CLI tour" section, in order, joined.
fn tour(readme: &str) -> String {
    let start = readme
        .find("\n## A CLI tour\n")
        .expect("README.md has a section `## A CLI tour`");
    let section = &readme[start + 1..];
    let section = match section[3..].find("\n## ") {
        Some(end) => &section[..end + 3],
        None => section,
    };
    let mut script = String::new();
    let mut in_block = false;
    for line in section.lines() {
        if !in_block && line == "```sh" {
            in_block = true;
        } else if in_block && line == "```" {
            in_block = false;
        } else if in_block {
            script.push_str(line);
            script.push('\n');
        }
    }
    assert!(!in_block, "a ```sh block of the tour is not closed");
    script
}

/// The tour's shell and whatever it started in the background (`wink serve`): one process
/// group, killed however the test ends, so that no server outlives it.
struct Group(Child);

impl Drop for Group {
    fn drop(&mut self) {
        let pgid = i32::try_from(self.0.id()).expect("a pid fits an i32");
        // SAFETY: kill(2) with a negative pid signals that process group and touches no memory
        // of ours; the group is the one `process_group(0)` made for the tour's shell.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
        let _ = self.0.wait();
    }
}

impl Group {
    /// The shell's exit status, or None when it has not exited within [`TIMEOUT`].
    fn wait(&mut self) -> Option<ExitStatus> {
        let started = Instant::now();
        while started.elapsed() < TIMEOUT {
            if let Some(status) = self.0.try_wait().expect("try_wait") {
                return Some(status);
            }
            thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

fn read(path: &Path) -> String {
    String::from_utf8_lossy(&fs::read(path).unwrap_or_default()).into_owned()
}

#[test]
fn readme_cli_tour_runs_as_written() {
    let script = tour(README);
    for needed in [
        "cargo install --path .",
        "WINK_NOW=",
        "wink archive",
        "wink cull",
        "wink scrub",
        "wink snapshot",
        "wink serve",
        "curl",
        "kill $!",
    ] {
        assert!(
            script.contains(needed),
            "the tour has `{needed}`:\n{script}"
        );
    }
    assert!(
        !script.contains("/srv"),
        "the tour writes only where it runs"
    );
    let what = "the README's CLI tour";
    if !require::tool("curl", "--version", what) || !require::tool("file", "--version", what) {
        return;
    }

    let tmp = tempfile::tempdir().unwrap();
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR"));
    let wink = Path::new(env!("CARGO_BIN_EXE_wink"));
    let bin_dir = wink.parent().expect("the binary's directory");
    let mut path = vec![bin_dir.to_path_buf()];
    path.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    let script_path = tmp.path().join("tour.sh");
    fs::write(&script_path, format!("{PRELUDE}{script}")).unwrap();
    let (stdout, stderr) = (tmp.path().join("stdout"), tmp.path().join("stderr"));

    let started = Instant::now();
    let mut command = Command::new("bash");
    command
        .args(["-euo", "pipefail"])
        .arg(&script_path)
        .current_dir(checkout)
        .env("PATH", std::env::join_paths(path).unwrap())
        .env("TMPDIR", tmp.path())
        .env_remove("WINK_NOW")
        // The tour's curl talks to loopback only; a proxy from the environment would take it
        // elsewhere.
        .env("NO_PROXY", "*")
        .env("no_proxy", "*")
        // Files, not pipes: a server left running holds no pipe this test would wait on.
        .stdout(File::create(&stdout).unwrap())
        .stderr(File::create(&stderr).unwrap());
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let mut group = Group(command.spawn().expect("bash runs"));
    let status = group.wait();
    drop(group);
    let (out, err) = (read(&stdout), read(&stderr));
    let status = status.unwrap_or_else(|| {
        panic!("the tour did not finish in {TIMEOUT:?}\nstdout:\n{out}\nstderr:\n{err}")
    });
    assert!(
        status.success(),
        "the tour failed ({status})\nstdout:\n{out}\nstderr:\n{err}"
    );
    eprintln!("the tour ran in {:.2?}", started.elapsed());

    // Where it ran: in a directory of its own under TMPDIR, nothing left in the checkout.
    let ran_in: Vec<PathBuf> = fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("renders/store").is_file())
        .collect();
    assert_eq!(
        ran_in.len(),
        1,
        "one mktemp directory holds the tour's store"
    );
    for name in ["renders", "page.html", "data", "t.kvseq"] {
        assert!(
            !checkout.join(name).exists(),
            "{name} written in the checkout"
        );
    }
    assert!(
        out.contains("t.kvseq: Wink peoplesearcher file, kvseq format, KVSEQ"),
        "file(1) read the magic:\n{out}"
    );
}
