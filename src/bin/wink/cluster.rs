//! `wink cluster status|verify|rebalance|remove|replay FILE [--token-file F]`: FILE is the
//! `cluster.json` of `cluster/up`; `verify` also takes a node's or the router's URL instead.
//! `wink cluster repair URL` takes a node's or the router's URL only.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use wink::cluster::admin::{self, Admin};
use wink::{Error, Result};

use crate::Status;

#[derive(clap::Subcommand)]
pub enum Command {
    /// The placement map, the stream's last sequence, and each node's applied sequence, as JSON.
    Status {
        /// The cluster's cluster.json.
        file: PathBuf,
        #[command(flatten)]
        token: Token,
    },
    /// Every owner of every partition holds the same titles, renders and bytes (exit 1 with the
    /// differences otherwise). Waits first until every node has applied the whole stream.
    /// TARGET is a cluster.json (each node's data read from disk: the bytes re-hashed) or a
    /// node's or the router's http:// URL (digests of each owner's records over HTTP, with the
    /// token of --token-file).
    Verify {
        #[arg(value_name = "TARGET")]
        file: PathBuf,
        /// Seconds to wait for the nodes to apply the stream.
        #[arg(long, value_name = "S", default_value_t = 60)]
        patience: u64,
        /// With a URL: every owner reads back every value and checks its CRC-32 first; a
        /// damaged one is quarantined there and counts as missing (`wink cluster repair`
        /// copies it back).
        #[arg(long)]
        check: bool,
        #[command(flatten)]
        token: Token,
    },
    /// Copies to each owner what another owner of the partition holds and it lacks, for every
    /// difference `verify URL --check` finds: a render it has no copy of (or whose value failed
    /// its check and was quarantined), a take-down it does not have. One line per action; exit
    /// 0 when nothing is left to repair, 1 with the remaining differences otherwise. URL is a
    /// node's or the router's http:// URL; the token of --token-file is sent.
    Repair {
        url: String,
        /// Seconds to wait for the nodes to apply the stream.
        #[arg(long, value_name = "S", default_value_t = 60)]
        patience: u64,
        #[command(flatten)]
        token: Token,
    },
    /// Spreads the partitions over the configuration's nodes: new owners join, catch up, and
    /// only then do old owners leave (each step a compare-and-set of the map).
    Rebalance {
        file: PathBuf,
        /// Seconds to wait for the new owners to catch up.
        #[arg(long, value_name = "S", default_value_t = 300)]
        patience: u64,
        #[command(flatten)]
        token: Token,
    },
    /// Takes a node out of the cluster for good (a machine that is gone): its partitions go to
    /// the other nodes, which catch up before the map stops naming it; it is never given a
    /// partition again.
    Remove {
        file: PathBuf,
        /// The node's name.
        node: String,
        /// Seconds to wait for the new owners to catch up.
        #[arg(long, value_name = "S", default_value_t = 300)]
        patience: u64,
        #[command(flatten)]
        token: Token,
    },
    /// Asks a node whose records were found out of step with the stream (`diverged` in
    /// `status`) to replay every message the stream holds and to vouch for its partitions again
    /// once it has caught up (applying is idempotent: nothing is lost or doubled).
    Replay {
        file: PathBuf,
        /// The node's name.
        node: String,
        #[command(flatten)]
        token: Token,
    },
}

#[derive(clap::Args)]
pub struct Token {
    /// The token file of the nodes (`wink serve --token-file`), sent with every request that
    /// changes something on a node; by default the one cluster.json names, if any.
    #[arg(long, value_name = "F")]
    token_file: Option<PathBuf>,
}

impl Token {
    /// The token of --token-file, or none.
    fn auth(&self) -> Result<wink::serve::Auth> {
        match self.token_file.as_deref() {
            Some(f) => wink::serve::Auth::from_file(f),
            None => Ok(wink::serve::Auth::none()),
        }
    }
}

pub fn run(command: Command) -> Result<Status> {
    let mut out = std::io::stdout();
    match command {
        Command::Status { file, token } => {
            let v = admin::status(&Admin::open(&file, token.token_file.as_deref())?)?;
            let text =
                serde_json::to_string_pretty(&v).map_err(|e| Error::invalid(e.to_string()))?;
            let _ = writeln!(out, "{text}");
            Ok(0)
        }
        Command::Rebalance {
            file,
            patience,
            token,
        } => {
            let admin = Admin::open(&file, token.token_file.as_deref())?;
            let done = admin::rebalance(&admin, Duration::from_secs(patience))?;
            let _ = writeln!(out, "{done}");
            Ok(0)
        }
        Command::Remove {
            file,
            node,
            patience,
            token,
        } => {
            let admin = Admin::open(&file, token.token_file.as_deref())?;
            let done = admin::remove(&admin, &node, Duration::from_secs(patience))?;
            let _ = writeln!(out, "{done}");
            Ok(0)
        }
        Command::Replay { file, node, token } => {
            let admin = Admin::open(&file, token.token_file.as_deref())?;
            let from = admin::replay(&admin, &node)?;
            let _ = writeln!(out, "node {node} replays the stream from sequence {from}");
            Ok(0)
        }
        Command::Repair {
            url,
            patience,
            token,
        } => {
            if !url.starts_with("http://") {
                return Err(Error::invalid(format!("{url:?}: not an http:// URL")));
            }
            let auth = token.auth()?;
            let done = admin::repair_url(&url, &auth, Duration::from_secs(patience))?;
            for a in &done.actions {
                let _ = writeln!(out, "{a}");
            }
            for p in &done.remaining {
                let _ = writeln!(out, "left: {p}");
            }
            if done.remaining.is_empty() {
                let _ = writeln!(
                    out,
                    "repaired: {} actions; every owner of every partition agrees",
                    done.actions.len()
                );
                Ok(0)
            } else {
                let _ = writeln!(out, "{} differences left", done.remaining.len());
                Ok(1)
            }
        }
        Command::Verify {
            file,
            patience,
            check,
            token,
        } => {
            let patience = Duration::from_secs(patience);
            let problems = match file.to_str().filter(|f| f.starts_with("http://")) {
                Some(url) => admin::verify_url(url, &token.auth()?, patience, check)?,
                None if check => {
                    return Err(Error::invalid(
                        "--check is for a URL: a cluster.json's verify re-hashes every value",
                    ))
                }
                None => {
                    let admin = Admin::open(&file, token.token_file.as_deref())?;
                    admin::verify(&admin, patience)?
                }
            };
            for p in &problems {
                let _ = writeln!(out, "{p}");
            }
            if problems.is_empty() {
                let _ = writeln!(out, "verified: every owner of every partition agrees");
                Ok(0)
            } else {
                let _ = writeln!(out, "{} differences", problems.len());
                Ok(1)
            }
        }
    }
}
