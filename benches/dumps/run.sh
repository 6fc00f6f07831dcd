#!/usr/bin/env bash
# The dumps benchmark (benches/dumps/bench.py): builds wink, installs the Python tools into
# target/pyenv, and runs ROUNDS rounds (default 3) under the machine's benchmark lock.
#
#   benches/dumps/run.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --bin wink
.ci/pytools
uptime
exec flock "${WINK_BENCH_LOCK:-/tmp/wink-bench.lock}" target/pyenv/bin/python benches/dumps/bench.py "$@"
