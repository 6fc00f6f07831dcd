//! Fuzz target `superblock`: the harness is [`wink::fuzzing::superblock`], shared with `tests/fuzz_replay.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| wink::fuzzing::superblock(data));
