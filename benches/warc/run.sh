#!/usr/bin/env bash
# The WARC benchmark (benches/warc/bench.py): builds wink, installs warcio into target/pyenv,
# and runs ROUNDS rounds (default 5) under the machine's benchmark lock.
#
#   benches/warc/run.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --bin wink
.ci/pytools
uptime
exec flock "${WINK_BENCH_LOCK:-/tmp/wink-bench.lock}" target/pyenv/bin/python benches/warc/bench.py "$@"
