//! Fuzz target `inode`: the harness is [`wink_harness::fuzzing::inode`], shared with `tests/fuzz_replay.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| wink_harness::fuzzing::inode(data));
