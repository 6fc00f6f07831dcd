//! Wink's test harnesses, on the engine's public API: a simulated disk that loses what was not
//! synced ([`sim`]), synthetic revision histories ([`synth`]) and the fuzz entry points of the
//! engine's formats ([`fuzzing`]), shared by `fuzz/` and `tests/fuzz_replay.rs`.
//!
//! The tests, the benchmarks, `fuzz/` and `wink demo` use it; the engine never does (its unit
//! tests compile `sim.rs` and `synth.rs` from source).

#![warn(missing_docs)]

pub mod fuzzing;
pub mod sim;
pub mod synth;
