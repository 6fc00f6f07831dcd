//! What a test needs from outside the project: a tool on the PATH, or the shared data set that CI
//! puts beside the checkout (`../shared`).
//!
//! In CI (`WINK_CI` set, as `.ci/run` sets it) a missing need fails the test: CI installs every
//! tool and has the shared data, so a miss there is a broken CI, not a reason to pass. Outside CI
//! a test may skip, but never silently: it prints a `SKIPPED` line and appends one to
//! `target/skipped-checks.txt`, so a run that skipped anything can be told from one that did not.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Whether this run is CI, where nothing may be skipped.
pub fn in_ci() -> bool {
    std::env::var_os("WINK_CI").is_some_and(|v| !v.is_empty() && v != "0")
}

/// Says that `what` is skipped because `why`: a panic in CI, a loud line and a counted entry
/// elsewhere.
pub fn skip(what: &str, why: &str) {
    if in_ci() {
        panic!("{what}: {why}; in CI (WINK_CI set) nothing may be skipped");
    }
    eprintln!("SKIPPED (not in CI): {what}: {why}");
    let log = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/skipped-checks.txt");
    if let Ok(mut f) = OpenOptions::new().create(true).append(true).open(log) {
        let _ = writeln!(f, "{what}: {why}");
    }
}

/// Whether `program` runs (`program ARG` exits, whatever its status); when it does not, the
/// check `what` is skipped as [`skip`] says.
pub fn tool(program: &str, arg: &str, what: &str) -> bool {
    let runs = Command::new(program).arg(arg).output().is_ok();
    if !runs {
        skip(what, &format!("{program} is not installed"));
    }
    runs
}

/// `../shared/SUB` beside the checkout, when it exists; otherwise the check `what` is skipped as
/// [`skip`] says.
pub fn shared(sub: &str, what: &str) -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared")
        .join(sub);
    if dir.exists() {
        Some(dir)
    } else {
        skip(what, &format!("{} is absent", dir.display()));
        None
    }
}

/// A Python tool that `.ci/pytools` installs (warcio, cdxj-indexer): in `target/pyenv/bin` of
/// the checkout, else on the PATH. When it is in neither, the check `what` is skipped as
/// [`skip`] says (a failure in CI).
pub fn python_tool(name: &str, what: &str) -> Option<PathBuf> {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/pyenv/bin")
        .join(name);
    if venv.is_file() {
        return Some(venv);
    }
    if Command::new(name).arg("-h").output().is_ok() {
        return Some(PathBuf::from(name));
    }
    skip(what, &format!("{name} is not installed (run .ci/pytools)"));
    None
}

/// A Python interpreter that can import `module`: the checkout's `target/pyenv` first, then
/// `python3` on the PATH.
pub fn python_with(module: &str, what: &str) -> Option<PathBuf> {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/pyenv/bin/python");
    for python in [venv, PathBuf::from("python3")] {
        let imports = Command::new(&python)
            .args(["-c", &format!("import {module}")])
            .output()
            .is_ok_and(|out| out.status.success());
        if imports {
            return Some(python);
        }
    }
    skip(
        what,
        &format!("no Python here imports {module} (run .ci/pytools)"),
    );
    None
}
