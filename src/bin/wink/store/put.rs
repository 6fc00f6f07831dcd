//! `wink put DIR DOMAIN TITLE REV [--tid UUID] [--type CT] [--encoding E] [--language L]
//! [--historical] [--wait] [FILE | -]`.

use std::path::PathBuf;

use wink::store::{Config, Labels, Put};
use wink::vfs::RealFs;
use wink::Result;

use super::{Title, Writing};
use crate::show::Out;
use crate::Status;

/// The content type of a render unless `--type` says otherwise.
pub const DEFAULT_TYPE: &str = "text/html; charset=utf-8";

const AFTER_HELP: &str = "\
Prints the render's tid once the render is durable. Without --tid the tid is made from the clock
(100-ns ticks; WINK_NOW when set) and is greater than every tid of REV already stored, so a later
put of a revision is its latest render. Writing the same REV and TID again replaces the value.
Which render is the latest depends on the revision, then the tid, never on the order puts with
given tids arrive in.

--encoding and --language label the render as HTTP's Content-Encoding and Content-Language
would (`gzip`; `de, en`): the bytes are stored as given, never decoded, and the labels are read
back with the render (`wink get --meta`, `wink ls --json`, `wink serve`'s answers).

--historical stores an old revision regenerated on request: it stays readable for the store's
historical TTL, and is refused for a revision newer than the current one.

Exit status 2, with nothing written, for an empty or over-long domain or title, a domain with
`/`, a revision that is not a non-negative integer, a tid that is not a version-1 UUID, a value
over the store's maximum, an encoding that is not one token of at most 64 bytes, a language that
is not at most 128 bytes of visible ASCII, a revision that is taken down, or a FILE that cannot
be read.";

/// Stores a render from FILE or stdin, and commits it.
#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The store's directory.
    dir: PathBuf,
    #[command(flatten)]
    title: Title,
    /// The revision: a non-negative integer.
    #[arg(allow_negative_numbers = true)]
    rev: String,
    /// Where the content comes from; `-` or none: stdin.
    file: Option<PathBuf>,
    /// The render's tid (a version-1 time UUID) instead of one made from the clock.
    #[arg(long, value_name = "UUID")]
    tid: Option<String>,
    /// The content type stored with the render.
    #[arg(long = "type", value_name = "CONTENT_TYPE", default_value = DEFAULT_TYPE)]
    content_type: String,
    /// The content coding the bytes are in (stored as given, never decoded): `gzip`, `br`, ...
    #[arg(long, value_name = "CODING")]
    encoding: Option<String>,
    /// The language of the content: `de`, `en-GB, fr`, ...
    #[arg(long, value_name = "TAGS")]
    language: Option<String>,
    /// A historical render (an old revision regenerated on request).
    #[arg(long)]
    historical: bool,
    #[command(flatten)]
    writing: Writing,
}

pub fn run(args: &Args) -> Result<Status> {
    let rev = super::parse_rev(&args.rev)?;
    let tid = args.tid.as_deref().map(super::parse_tid).transpose()?;
    let labels = Labels {
        encoding: args.encoding.clone(),
        language: args.language.clone(),
    };
    // Checked before the input is read, so a usage error is one whatever the input.
    labels.check()?;
    super::expect_store(&args.dir)?;
    // Read against the store's maximum before the writer lock is taken, so that a second
    // writer's presence does not hide the usage error (the store refuses it again).
    let max = Config::read(&RealFs, &args.dir.join("store"))?.max_value;
    let over = format!("this store's maximum of {max} (--max-value at init)");
    let content = crate::input::read_input(args.file.as_deref(), max, &over)?;
    let mut store = super::open_writer(&args.dir, &args.writing)?;
    // The store validates the put (domain, title, content type, size) and commits it.
    let tid = store.put(&Put {
        domain: &args.title.domain,
        title: &args.title.title,
        rev,
        tid,
        content_type: &args.content_type,
        labels: &labels,
        value: &content,
        historical: args.historical,
    })?;
    let mut out = Out::new();
    out.line(&tid.to_string())?;
    out.finish()?;
    Ok(0)
}
