//! Fuzz target `warc_record`: the harness is [`wink::warc::fuzz_warc_record`], shared with
//! `tests/fuzz_replay.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| wink::warc::fuzz_warc_record(data));
