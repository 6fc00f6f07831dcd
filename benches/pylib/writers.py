"""The contenders' WARC writers over the corpus's renders: warcio's and fastwarc's, at a given gzip
level, one gzip member per record, one resource record per render with the URI, date and content
type `wink export` gives it (digests computed by each writer).

    python writers.py warcio|fastwarc CORPUS OUT.warc.gz LEVEL
    python writers.py warcio CORPUS OUT.warc plain       # warcio without gzip
"""
import sys
import zlib
from datetime import datetime, timezone
from io import BytesIO
from urllib.parse import quote


def renders(corpus):
    with open(f"{corpus}/manifest.tsv") as m:
        next(m)
        for line in m:
            doc, rev, ts = line.rstrip("\n").split("\t")[:3]
            with open(f"{corpus}/{doc}/{rev}.html", "rb") as page:
                body = page.read()
            date = datetime.fromtimestamp(int(ts), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            uri = f"https://corpus/api/rest_v1/page/html/{quote(doc, safe='')}/{int(rev)}"
            yield uri, date, body


def warcio(corpus, out, level):
    from warcio import warcwriter

    class Gzipping(warcwriter.GzippingWrapper):
        def __init__(self, out):
            super().__init__(out)
            # warcio's own is level 9, hard-coded.
            self.compressor = zlib.compressobj(level, zlib.DEFLATED, zlib.MAX_WBITS + 16)

    warcwriter.GzippingWrapper = Gzipping
    with open(out, "wb") as f:
        w = warcwriter.WARCWriter(f, gzip=level is not None, warc_version="1.1")
        for uri, date, body in renders(corpus):
            rec = w.create_warc_record(uri, "resource", payload=BytesIO(body), length=len(body),
                                       warc_content_type="text/html; charset=utf-8",
                                       warc_headers_dict={"WARC-Date": date})
            w.write_record(rec)


def fastwarc(corpus, out, level):
    from fastwarc.stream_io import GzipWriter
    from fastwarc.warc import WarcRecord, WarcRecordType

    w = GzipWriter(out, compression_level=level)
    for uri, date, body in renders(corpus):
        r = WarcRecord()
        r.init_headers(record_type=WarcRecordType.resource)
        r.headers["WARC-Target-URI"] = uri
        r.headers["WARC-Date"] = date
        r.headers["Content-Type"] = "text/html; charset=utf-8"
        r.set_bytes_content(body)
        r.write(w, checksum_data=True)
        w.finish()  # one gzip member per record, as fastwarc's own `recompress` does
    w.close()


if __name__ == "__main__":
    level = None if sys.argv[4] == "plain" else int(sys.argv[4])
    {"warcio": warcio, "fastwarc": fastwarc}[sys.argv[1]](sys.argv[2], sys.argv[3], level)
