"""What the Python benchmarks share: where things are, cold starts, timing."""
import os
import shutil
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WINK = os.path.join(ROOT, "target/release/wink")
PY = os.path.join(ROOT, "target/pyenv/bin/python")
CORPUS = os.path.normpath(os.path.join(ROOT, "../shared/corpus"))
WRITERS = os.path.join(ROOT, "benches/pylib/writers.py")
# Bytes of the corpus's renders: rates are of these, 10^6 bytes per second.
RAW = 128_835_824


def evict(paths):
    """Drops `paths` (files, or every file under a directory) from the page cache."""
    for p in paths:
        if os.path.isdir(p):
            evict([os.path.join(d, f) for d, _, fs in os.walk(p) for f in fs])
            continue
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def timed(cmd, cold):
    """Seconds `cmd` takes, the files in `cold` dropped from the page cache first."""
    evict(cold)
    started = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def fresh(path):
    """Removes `path`, a file or a directory, when it exists."""
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.remove(path)
