//! `wink kv append FILE KEY [VALUE | -]`.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use wink::Result;

use crate::show::Out;
use crate::Status;

/// Appends an entry, syncs, and prints the new entry's pointer.
#[derive(clap::Args)]
pub struct Args {
    /// The kvseq file.
    file: PathBuf,
    /// The key, as the argument's bytes.
    key: OsString,
    /// The value, as the argument's bytes; `-` or none: read it from stdin.
    value: Option<OsString>,
}

pub fn run(args: &Args) -> Result<Status> {
    let value = match args.value.as_deref() {
        Some(v) if v != "-" => v.as_bytes().to_vec(),
        _ => crate::input::read_input(
            None,
            crate::input::MAX_INPUT,
            "the most a `wink kv` input takes (256 MiB)",
        )?,
    };
    let mut writer = super::open_writer(&args.file)?;
    let ptr = writer.kv.append(args.key.as_bytes(), &value)?;
    writer.kv.sync()?;
    let mut out = Out::new();
    out.line(&ptr.to_string())?;
    out.finish()?;
    Ok(0)
}
