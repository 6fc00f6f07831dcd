"""The contenders' readers: Python's json + tarfile over an Enterprise snapshot (the floor of a
script), and fastwarc over a gzip WARC (every record's payload read; `--verify` also checks every
block digest, as `wink import --warc` does).

    python readers.py enterprise FILE.json.tar.gz
    python readers.py fastwarc FILE.warc.gz [--verify]
"""
import json
import sys
import tarfile


def enterprise(path):
    articles = html = 0
    with tarfile.open(path, "r:gz") as t:
        for member in t:
            f = t.extractfile(member)
            if f is None:
                continue
            for line in f:
                a = json.loads(line)
                html += len(a["article_body"]["html"].encode("utf-8"))
                articles += 1
    print(articles, html)


def fastwarc(path, verify):
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    records = payload = 0
    for r in ArchiveIterator(path, record_types=WarcRecordType.any_type, parse_http=False):
        if verify and not r.verify_block_digest(consume=False):
            raise SystemExit(f"digest failed at {r.stream_pos}")
        payload += len(r.reader.read())
        records += 1
    print(records, payload)


if __name__ == "__main__":
    if sys.argv[1] == "enterprise":
        enterprise(sys.argv[2])
    else:
        fastwarc(sys.argv[2], "--verify" in sys.argv)
