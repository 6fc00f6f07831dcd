//! Fuzz target `perm_read`: the harness is [`wink_harness::fuzzing::perm_read`], shared with `tests/fuzz_replay.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| wink_harness::fuzzing::perm_read(data));
