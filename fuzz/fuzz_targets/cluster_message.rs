//! Fuzz target `cluster_message`: the harness is [`wink::cluster::message::fuzz`], shared with
//! `tests/fuzz_replay.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| wink::cluster::message::fuzz(data));
