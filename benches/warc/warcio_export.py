"""The contender: the corpus's renders written as WARC resource records by warcio's own writer.

    python warcio_export.py CORPUS OUT.warc.gz [--plain]

Reads CORPUS/manifest.tsv and each DOC/REV.html, and writes one resource record per render with
the URI, date and content type `wink export` gives it; warcio computes the digests and gzips
each record (its default level, 9) unless --plain.
"""
import sys
from io import BytesIO
from datetime import datetime, timezone
from urllib.parse import quote

from warcio.warcwriter import WARCWriter


def main():
    corpus, out = sys.argv[1], sys.argv[2]
    plain = "--plain" in sys.argv
    with open(f"{corpus}/manifest.tsv") as m, open(out, "wb") as f:
        w = WARCWriter(f, gzip=not plain, warc_version="1.1")
        next(m)
        for line in m:
            doc, rev, ts = line.rstrip("\n").split("\t")[:3]
            with open(f"{corpus}/{doc}/{rev}.html", "rb") as page:
                body = page.read()
            date = datetime.fromtimestamp(int(ts), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            uri = f"https://corpus/api/rest_v1/page/html/{quote(doc, safe='')}/{int(rev)}"
            rec = w.create_warc_record(
                uri,
                "resource",
                payload=BytesIO(body),
                length=len(body),
                warc_content_type="text/html; charset=utf-8",
                warc_headers_dict={"WARC-Date": date},
            )
            w.write_record(rec)


if __name__ == "__main__":
    main()
