"""WARC export and import of the shared corpus: Wink against warcio's own writer and against the
read ceiling, in one run, several rounds; medians and ratios at the end.

    benches/warc/run.sh [ROUNDS]        # builds, installs the tools, takes the bench lock

Per round, each contender starts cold (the files it reads dropped from the page cache with
POSIX_FADV_DONTNEED, the only files touched):

- cat:      `cat` of the store's container files to /dev/null (the read ceiling: every byte a
            full export reads, sequentially, nothing written);
- none:     `wink export --compress none` (a .warc, plain);
- gzip:     `wink export` (a gzip member per record, level 6, compressed on every core);
- gzip9:    `wink export --level 9` (warcio's level);
- gzip1:    `wink export --level 1` (the fastest gzip);
- zstd:     `wink export --compress zstd` (level 3);
- warcio:   benches/pylib/writers.py, warcio's writer (gzip level 9) over the same renders, read from the
            corpus's files;
- warcio-plain: the same, uncompressed;
- import-files: `wink import` of the corpus (manifest and files) into an empty store;
- import-warc:  `wink import --warc` of the gzip export into an empty store.

Rates are of the renders' bytes (128.8 MB), 10^6 bytes per second.
"""
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pylib"))
from common import CORPUS, PY, RAW, ROOT, WINK, WRITERS, evict, fresh, timed  # noqa: E402

WORK = os.path.join(ROOT, "target/bench-warc")


def clean_outputs():
    for f in os.listdir(WORK):
        if f.startswith("out") or f.startswith("imp"):
            fresh(os.path.join(WORK, f))


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    os.makedirs(WORK, exist_ok=True)
    store = os.path.join(WORK, "store")
    if not os.path.exists(os.path.join(store, "store")):
        fresh(store)
        subprocess.run([WINK, "init", store], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([WINK, "import", store, CORPUS], check=True, stdout=subprocess.DEVNULL)
    containers = sorted(
        os.path.join(store, f) for f in os.listdir(store) if f.startswith("c") and f.endswith(".data")
    )
    runs = {}
    for r in range(rounds):
        clean_outputs()
        t = {}
        t["cat"] = timed(["sh", "-c", "cat " + " ".join(containers) + " > /dev/null"], [store])
        for name, extra, out in [
            ("none", ["--compress", "none"], "out-none.warc"),
            ("gzip", [], "out-gzip.warc.gz"),
            ("gzip9", ["--level", "9"], "out-gzip9.warc.gz"),
            ("gzip1", ["--level", "1"], "out-gzip1.warc.gz"),
            ("zstd", [], "out-zstd.warc.zst"),
        ]:
            t[name] = timed([WINK, "export", store, "-o", os.path.join(WORK, out)] + extra, [store])
        t["warcio"] = timed(
            [PY, WRITERS, "warcio", CORPUS, os.path.join(WORK, "out-warcio.warc.gz"), "9"],
            [CORPUS],
        )
        t["warcio-plain"] = timed(
            [PY, WRITERS, "warcio", CORPUS, os.path.join(WORK, "out-warcio.warc"), "plain"],
            [CORPUS],
        )
        for name, src in [("import-files", [CORPUS]), ("import-warc", ["--warc", os.path.join(WORK, "out-gzip.warc.gz")])]:
            dst = os.path.join(WORK, f"imp-{name}")
            subprocess.run([WINK, "init", dst], check=True, stdout=subprocess.DEVNULL)
            t[name] = timed([WINK, "import", dst] + src, [CORPUS] + src[-1:])
        sizes = {k: os.path.getsize(os.path.join(WORK, f)) for k, f in [
            ("none", "out-none.warc"), ("gzip", "out-gzip.warc.gz"), ("gzip9", "out-gzip9.warc.gz"),
            ("gzip1", "out-gzip1.warc.gz"), ("zstd", "out-zstd.warc.zst"), ("warcio", "out-warcio.warc.gz")]}
        print(f"round {r + 1}: " + ", ".join(f"{k} {v:.3f}s" for k, v in t.items()), flush=True)
        for k, v in t.items():
            runs.setdefault(k, []).append(v)
        ratios = {
            "export_gzip_vs_warcio": t["warcio"] / t["gzip"],
            "export_gzip9_vs_warcio": t["warcio"] / t["gzip9"],
            "export_gzip1_vs_warcio": t["warcio"] / t["gzip1"],
            "export_zstd_vs_warcio": t["warcio"] / t["zstd"],
            "export_none_vs_warcio_plain": t["warcio-plain"] / t["none"],
            "export_none_vs_cat": t["cat"] / t["none"],
            "import_warc_vs_files": t["import-files"] / t["import-warc"],
        }
        for k, v in ratios.items():
            runs.setdefault(k, []).append(v)
    print()
    print(f"{'contender':<28} {'median s':>9} {'MB/s':>8}   (of {RAW / 1e6:.1f} MB of renders)")
    for k in ["cat", "none", "gzip", "gzip9", "gzip1", "zstd", "warcio", "warcio-plain", "import-files", "import-warc"]:
        m = statistics.median(runs[k])
        print(f"{k:<28} {m:>9.3f} {RAW / 1e6 / m:>8.1f}")
    print()
    print(f"{'ratio (per round, then median)':<32} {'median':>7} {'range':>15}  target")
    targets = {
        "export_gzip_vs_warcio": ">= 10",
        "export_gzip9_vs_warcio": "",
        "export_gzip1_vs_warcio": "",
        "export_zstd_vs_warcio": "",
        "export_none_vs_warcio_plain": "",
        "export_none_vs_cat": ">= 0.5",
        "import_warc_vs_files": ">= 0.5",
    }
    for k, target in targets.items():
        v = runs[k]
        print(f"{k:<32} {statistics.median(v):>7.2f} {min(v):>7.2f}-{max(v):<7.2f}  {target}")
    print()
    print("file sizes: " + ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in sizes.items()))
    print("load average:", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    out = os.path.join(WORK, "results.json")
    with open(out, "w") as f:
        json.dump({"rounds": runs, "sizes": sizes, "load": os.getloadavg()}, f, indent=1)
    print("rounds in", out)


if __name__ == "__main__":
    main()
