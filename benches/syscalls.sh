#!/usr/bin/env bash
# Counts the syscalls of one warm get_latest and one committed put (examples/syscall_walk.rs)
# with strace, by name, between the example's markers.
#
#   benches/syscalls.sh            (from the checkout; installs strace when missing)
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v strace >/dev/null 2>&1; then
  apt-get install -y -qq strace >/dev/null
fi
cargo build --release --example syscall_walk -q
trace=$(mktemp)
trap 'rm -f "$trace"' EXIT
strace -f -o "$trace" target/release/examples/syscall_walk 2>/dev/null
# Lines between "== NAME ==" markers, by section; the marker writes themselves are not counted.
awk '
  /write\(2, "== / { match($0, /== [a-z_]+ ==/); sect = substr($0, RSTART + 3, RLENGTH - 6); next }
  # A call interrupted by another thread shows twice ("unfinished", "resumed"): count it once.
  /resumed>|^[0-9]+ +(\+\+\+|---)/ { next }
  sect != "" && sect != "end" {
    line = $0; sub(/^[0-9]+ +/, "", line); split(line, p, "("); n[sect]++; c[sect, p[1]]++
  }
  END {
    for (k in c) { split(k, q, SUBSEP); printf "%s\t%s\t%d\n", q[1], q[2], c[k] }
    for (s in n) printf "%s\tTOTAL\t%d\n", s, n[s]
  }' "$trace" | sort
