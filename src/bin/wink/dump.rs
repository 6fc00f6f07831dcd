//! `wink dump FILE [--json] [--values]`: a file's superblock and contents.

use std::path::{Path, PathBuf};

use serde::Serialize;
use wink::format::hindex::{Cell, HIndex};
use wink::format::kvseq::KvSeq;
use wink::format::perm::{Pair, Perm};
use wink::format::superblock::{Format, Superblock, FORMAT_VALUE_OFFSET};
use wink::storage::FileStorage;
use wink::{Error, Result};

use crate::show::{self, Out};
use crate::Status;

const AFTER_HELP: &str = "\
Text output: one `NAME<TAB>VALUE` line per superblock variable (FORMAT also by name, PURPOSE
also as text), then a `#` header line and one tab-separated line per kvseq entry (pointer,
delflag or - when the file has none, key, value length[, value]), per used hindex cell (cell,
pointer, stored hash or - when CELLSZ is 1) or per perm pair (index, pointer, hash).

Keys and values: a JSON string literal (\"abc\") when valid UTF-8, else 0x and lowercase hex.
With --json, `key`/`value` hold the string (null when not UTF-8) and `key_hex`/`value_hex`
always hold the bytes as hex.

What was read before damage is printed; then the error, with exit status 3.";

/// Prints a Wink file: superblock variables, then its entries, used cells or pairs.
#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// A kvseq, hindex or perm file.
    file: PathBuf,
    /// JSON lines: the superblock object first, then one object per entry, cell or pair.
    #[arg(long)]
    json: bool,
    /// Also print each kvseq entry's value.
    #[arg(long)]
    values: bool,
}

pub fn run(args: &Args) -> Result<Status> {
    let sb = Superblock::read(&FileStorage::open(&args.file, false)?)?;
    let mut out = Out::new();
    superblock(&mut out, args, &sb)?;
    let result = match sb.format() {
        Some(Format::KvSeq) => entries(&mut out, args),
        Some(Format::HIndex) => cells(&mut out, args),
        Some(Format::Perm) => pairs(&mut out, args),
        None => Err(unknown_format(&args.file, &sb)),
    };
    out.finish()?;
    result.map(|()| 0)
}

fn unknown_format(path: &Path, sb: &Superblock) -> Error {
    let what = format!("FORMAT 0x{:x} is not a known Wink format", sb.format_code());
    Error::unsupported(path, FORMAT_VALUE_OFFSET, what)
}

#[derive(Serialize)]
struct SuperblockLine {
    r#type: &'static str,
    file: String,
    format: Option<&'static str>,
    format_code: i64,
    purpose: String,
    sbsize: u64,
    vars: Vec<VarLine>,
}

#[derive(Serialize)]
struct VarLine {
    name: String,
    value: i64,
}

fn superblock(out: &mut Out, args: &Args, sb: &Superblock) -> Result<()> {
    if args.json {
        return out.json(&SuperblockLine {
            r#type: "superblock",
            file: args.file.to_string_lossy().into_owned(),
            format: sb.format().map(Format::name),
            format_code: sb.format_code(),
            purpose: sb.purpose().text(),
            sbsize: sb.sbsize(),
            vars: sb
                .vars()
                .iter()
                .map(|(n, v)| VarLine {
                    name: n.trimmed(),
                    value: *v,
                })
                .collect(),
        });
    }
    for (i, (name, value)) in sb.vars().iter().enumerate() {
        let note = match i {
            1 => format!("\t{}", sb.format().map_or("unknown", Format::name)),
            2 => format!("\t{}", show::quoted(&sb.purpose().text())),
            _ => String::new(),
        };
        out.line(&format!("{name}\t{value}{note}"))?;
    }
    Ok(())
}

#[derive(Serialize)]
struct EntryLine<'a> {
    r#type: &'static str,
    ptr: u64,
    deleted: bool,
    key: Option<&'a str>,
    key_hex: String,
    value_len: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<Option<&'a str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    value_hex: Option<String>,
}

fn entries(out: &mut Out, args: &Args) -> Result<()> {
    let kv = KvSeq::open_path(&args.file, false)?;
    if !args.json {
        let value = if args.values { "\tvalue" } else { "" };
        out.line(&format!("# pointer\tdelflag\tkey\tvalue_len{value}"))?;
    }
    let iter = if args.values {
        kv.iter_entries(kv.first(), false)
    } else {
        kv.iter(kv.first(), false)
    };
    for item in iter {
        let info = item?;
        let l = info.layout;
        let value = info.value.as_deref();
        if args.json {
            out.json(&EntryLine {
                r#type: "entry",
                ptr: l.ptr.0,
                deleted: l.deleted,
                key: show::utf8(&info.key),
                key_hex: show::hex(&info.key),
                value_len: l.value_len,
                value: value.map(show::utf8),
                value_hex: value.map(show::hex),
            })?;
            continue;
        }
        let flag = if kv.has_delflag() {
            u8::from(l.deleted).to_string()
        } else {
            "-".into()
        };
        let value = value
            .map(|v| format!("\t{}", show::text(v)))
            .unwrap_or_default();
        out.line(&format!(
            "{}\t{flag}\t{}\t{}{value}",
            l.ptr,
            show::text(&info.key),
            l.value_len
        ))?;
    }
    Ok(())
}

#[derive(Serialize)]
struct CellLine {
    r#type: &'static str,
    cell: u64,
    ptr: u64,
    stored_hash_hex: Option<String>,
}

fn cells(out: &mut Out, args: &Args) -> Result<()> {
    let index = HIndex::open_path(&args.file, false)?;
    if !args.json {
        out.line("# cell\tpointer\tstored_hash")?;
    }
    for item in index.used_cells() {
        let (cell, ptr) = item?;
        let stored = match index.get(cell)? {
            Cell::Used { stored_hash, .. } if index.cellsz() >= 2 => {
                Some(format!("{stored_hash:016x}"))
            }
            _ => None,
        };
        if args.json {
            out.json(&CellLine {
                r#type: "cell",
                cell,
                ptr: ptr.0,
                stored_hash_hex: stored,
            })?;
        } else {
            let stored = stored.map_or("-".into(), |h| format!("0x{h}"));
            out.line(&format!("{cell}\t{ptr}\t{stored}"))?;
        }
    }
    Ok(())
}

#[derive(Serialize)]
struct PairLine {
    r#type: &'static str,
    index: u64,
    ptr: u64,
    hash: u64,
}

/// Pairs read per chunk: bounds memory on perms of any size.
const PAIR_CHUNK: u64 = 4096;

fn pairs(out: &mut Out, args: &Args) -> Result<()> {
    let perm = Perm::open_path(&args.file, false)?;
    if !args.json {
        out.line("# index\tpointer\thash")?;
    }
    let mut start = 0;
    while start < perm.len() {
        let n = PAIR_CHUNK.min(perm.len() - start);
        match perm.read_range(start, n) {
            Ok(chunk) => (start..)
                .zip(chunk)
                .try_for_each(|(i, p)| pair(out, args, i, p))?,
            // Pair by pair, so the pairs before a damaged one are printed before the error.
            Err(_) => (start..start + n).try_for_each(|i| pair(out, args, i, perm.get(i)?))?,
        }
        start += n;
    }
    Ok(())
}

fn pair(out: &mut Out, args: &Args, index: u64, pair: Pair) -> Result<()> {
    if args.json {
        out.json(&PairLine {
            r#type: "pair",
            index,
            ptr: pair.ptr.0,
            hash: pair.hash,
        })
    } else {
        out.line(&format!("{index}\t{}\t{}", pair.ptr, pair.hash))
    }
}
