//! Fuzz target `title_record`: the harness is [`wink_harness::fuzzing::title_record`], shared with `tests/fuzz_replay.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| wink_harness::fuzzing::title_record(data));
