"""Writes the corpus as an Enterprise HTML snapshot with Python's json and tarfile (one gzip
stream, level 6, as Enterprise's are; two NDJSON members): an article per render, its name the
document (spaces for dashes), its revision the file's, its date the manifest's.

    python snapshot.py CORPUS OUT.json.tar.gz
"""
import io
import json
import sys
import tarfile
from datetime import datetime, timezone


def main(corpus, out):
    lines = []
    with open(f"{corpus}/manifest.tsv") as m:
        next(m)
        for line in m:
            doc, rev, ts = line.rstrip("\n").split("\t")[:3]
            with open(f"{corpus}/{doc}/{rev}.html", encoding="utf-8") as page:
                html = page.read()
            date = datetime.fromtimestamp(int(ts), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            name = doc.replace("-", " ")
            lines.append(json.dumps({
                "name": name, "identifier": len(lines) + 1, "date_modified": date,
                "version": {"identifier": int(rev), "comment": "", "is_minor_edit": False},
                "url": "https://en.wikipedia.org/wiki/" + doc.replace("-", "_"),
                "namespace": {"identifier": 0}, "in_language": {"identifier": "en"},
                "is_part_of": {"identifier": "enwiki", "url": "https://en.wikipedia.org"},
                "article_body": {"html": html, "wikitext": ""},
            }) + "\n")
    half = len(lines) // 2
    with tarfile.open(out, "w:gz", compresslevel=6) as t:
        for n, part in enumerate([lines[:half], lines[half:]]):
            data = "".join(part).encode("utf-8")
            info = tarfile.TarInfo(f"enwiki_{n}.ndjson")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
