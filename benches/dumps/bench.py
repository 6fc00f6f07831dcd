"""The dumps benchmark: Enterprise import, WARC writing and WARC reading of the shared corpus,
Wink against the field's tools, in one run, several rounds; medians and ratios at the end.

    benches/dumps/run.sh [ROUNDS]       # builds, installs the tools, takes the bench lock

Per round each contender starts cold (the files it reads dropped from the page cache with
POSIX_FADV_DONTNEED, the only files touched):

- ent-import:   `wink import --enterprise` of the corpus as an Enterprise snapshot (1,150
                articles, written once by snapshot.py with json + tarfile, gzip 6) into an
                empty store;
- files-import: `wink import` of the corpus's files (the same renders) into an empty store;
- py-ent-read:  Python's json + tarfile reading the same snapshot (readers.py; the floor of a
                script: it stores nothing);
- wink-gzN:     `wink export --level N` of the corpus's store (N = 9, warcio's and fastwarc's
                default, and 6, Wink's);
- warcio-gzN:   warcio's WARCWriter at level N over the corpus's files (benches/pylib/writers.py);
- fastwarc-gzN: fastwarc's WarcRecord.write into a GzipWriter at level N, one member a record;
- warc-import:  `wink import --warc` of the level-6 export into an empty store;
- fastwarc-read / fastwarc-read-verify: fastwarc's ArchiveIterator reading every record's
                payload of the same file, without and with block-digest verification.

Rates are of the renders' bytes (128.8 MB), 10^6 bytes per second.
"""
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pylib"))
from common import CORPUS, PY, RAW, ROOT, WINK, WRITERS, evict, fresh, timed  # noqa: E402

HERE = os.path.join(ROOT, "benches/dumps")
WORK = os.path.join(ROOT, "target/bench-dumps")
LEVELS = [9, 6]


def w(name):
    return os.path.join(WORK, name)


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    os.makedirs(WORK, exist_ok=True)
    store = w("store")
    if not os.path.exists(os.path.join(store, "store")):
        fresh(store)
        subprocess.run([WINK, "init", store], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([WINK, "import", store, CORPUS], check=True, stdout=subprocess.DEVNULL)
    snap = w("enwiki-NS0-corpus-ENTERPRISE-HTML.json.tar.gz")
    if not os.path.exists(snap):
        subprocess.run([PY, os.path.join(HERE, "snapshot.py"), CORPUS, snap], check=True)
    runs, sizes = {}, {}
    for r in range(rounds):
        for f in os.listdir(WORK):
            if f.startswith(("out", "imp")):
                fresh(w(f))
        t = {}
        for name, args, cold in [
            ("ent-import", ["--enterprise", snap], [snap]),
            ("files-import", [CORPUS], [CORPUS]),
        ]:
            dst = w(f"imp-{name}")
            subprocess.run([WINK, "init", dst], check=True, stdout=subprocess.DEVNULL)
            t[name] = timed([WINK, "import", dst] + args, cold)
        t["py-ent-read"] = timed([PY, os.path.join(HERE, "readers.py"), "enterprise", snap], [snap])
        for level in LEVELS:
            out = w(f"out-wink-gz{level}.warc.gz")
            t[f"wink-gz{level}"] = timed(
                [WINK, "export", store, "-o", out, "--level", str(level)], [store])
            for tool in ["warcio", "fastwarc"]:
                out = w(f"out-{tool}-gz{level}.warc.gz")
                t[f"{tool}-gz{level}"] = timed(
                    [PY, WRITERS, tool, CORPUS, out, str(level)], [CORPUS])
        gz = w("out-wink-gz6.warc.gz")
        dst = w("imp-warc")
        subprocess.run([WINK, "init", dst], check=True, stdout=subprocess.DEVNULL)
        t["warc-import"] = timed([WINK, "import", dst, "--warc", gz], [gz])
        t["fastwarc-read"] = timed([PY, os.path.join(HERE, "readers.py"), "fastwarc", gz], [gz])
        t["fastwarc-read-verify"] = timed(
            [PY, os.path.join(HERE, "readers.py"), "fastwarc", gz, "--verify"], [gz])
        for level in LEVELS:
            for tool in ["wink", "warcio", "fastwarc"]:
                sizes[f"{tool}-gz{level}"] = os.path.getsize(w(f"out-{tool}-gz{level}.warc.gz"))
        sizes["snapshot"] = os.path.getsize(snap)
        print(f"round {r + 1}: " + ", ".join(f"{k} {v:.3f}s" for k, v in t.items()), flush=True)
        ratios = {
            "ent_import_vs_files_import": t["files-import"] / t["ent-import"],
            "ent_import_vs_python_json_tarfile": t["py-ent-read"] / t["ent-import"],
            "warc_import_vs_fastwarc_read": t["fastwarc-read"] / t["warc-import"],
            "warc_import_vs_fastwarc_read_verify": t["fastwarc-read-verify"] / t["warc-import"],
        }
        for level in LEVELS:
            ratios[f"write_gz{level}_vs_warcio"] = t[f"warcio-gz{level}"] / t[f"wink-gz{level}"]
            ratios[f"write_gz{level}_vs_fastwarc"] = t[f"fastwarc-gz{level}"] / t[f"wink-gz{level}"]
        for k, v in list(t.items()) + list(ratios.items()):
            runs.setdefault(k, []).append(v)
    print()
    print(f"{'contender':<22} {'median s':>9} {'MB/s':>8} {'output MB':>10}   (of {RAW / 1e6:.1f} MB of renders)")
    for k in ["ent-import", "files-import", "py-ent-read"] + [
        f"{tool}-gz{level}" for level in LEVELS for tool in ["wink", "warcio", "fastwarc"]
    ] + ["warc-import", "fastwarc-read", "fastwarc-read-verify"]:
        m = statistics.median(runs[k])
        size = f"{sizes[k] / 1e6:>10.2f}" if k in sizes else " " * 10
        print(f"{k:<22} {m:>9.3f} {RAW / 1e6 / m:>8.1f} {size}")
    print()
    targets = {
        "ent_import_vs_files_import": ">= 0.80",
        "ent_import_vs_python_json_tarfile": "(floor of a script)",
        "write_gz9_vs_warcio": ">= 10",
        "write_gz9_vs_fastwarc": ">= 1.0",
        "write_gz6_vs_warcio": ">= 10",
        "write_gz6_vs_fastwarc": ">= 1.0",
        "warc_import_vs_fastwarc_read": ">= 0.80",
        "warc_import_vs_fastwarc_read_verify": "",
    }
    print(f"{'ratio (per round, then median)':<38} {'median':>7} {'range':>15}  target")
    for k, target in targets.items():
        v = runs[k]
        print(f"{k:<38} {statistics.median(v):>7.2f} {min(v):>7.2f}-{max(v):<7.2f}  {target}")
    print()
    print(f"snapshot {sizes['snapshot'] / 1e6:.1f} MB (json + tarfile, gzip 6)")
    print("load average:", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    with open(w("results.json"), "w") as f:
        json.dump({"rounds": runs, "sizes": sizes, "load": os.getloadavg()}, f, indent=1)
    print("rounds in", w("results.json"))


if __name__ == "__main__":
    main()
