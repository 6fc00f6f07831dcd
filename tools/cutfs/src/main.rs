//! `cutfs`: mount a power-cut filesystem, or command one.
//!
//!     cutfs mount BACKING MOUNTPOINT --control SOCKET [--journaled-names]
//!                                           (foreground, until unmounted)
//!     cutfs cut SOCKET | cutfs sync SOCKET | cutfs unmount SOCKET

use std::path::Path;
use std::process::ExitCode;

const USAGE: &str =
    "usage: cutfs mount BACKING MOUNTPOINT --control SOCKET [--journaled-names]\n       \
                     cutfs cut|sync|unmount SOCKET";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        ["mount", backing, mountpoint, "--control", control, rest @ ..]
            if rest.is_empty() || rest == ["--journaled-names"] =>
        {
            let names = if rest.is_empty() {
                cutfs::Names::Strict
            } else {
                cutfs::Names::Journaled
            };
            cutfs::serve(
                Path::new(backing),
                Path::new(mountpoint),
                Path::new(control),
                names,
            )
        }
        [verb @ ("cut" | "sync" | "unmount"), control] => {
            cutfs::command(Path::new(control), verb).map(|_| ())
        }
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cutfs: {e}");
            ExitCode::FAILURE
        }
    }
}
