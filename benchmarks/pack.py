"""CPU cost and size of the packed documents that cross the output shuffle.

Every conversion record of the given WET files becomes an ``OutDoc`` (md5 of the URL, URL,
page text, WARC-Date), as the plan's last pass makes them; each is packed
(``clean.output.pack_doc``: zlib level 1) and unpacked again (``unpack_doc``), checked equal.
Printed: documents, text bytes, CPU seconds of pack and unpack (``time.process_time``, so the
figures hold on a loaded machine), and the bytes a document takes in the shuffle, pickled (the
local engine) and in Beam's coder, plain and packed.

Usage: ``python benchmarks/pack.py FILE.warc.wet.gz …``
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
import time

from warcio.archiveiterator import ArchiveIterator

from c4forge.clean.output import pack_doc, unpack_doc
from c4forge.corpus.documents import make_out_doc


def read_docs(paths: list[str]) -> list:
    docs = []
    for path in paths:
        with open(path, "rb") as f:
            for rec in ArchiveIterator(f):
                if rec.rec_type != "conversion":
                    continue
                url = rec.rec_headers.get_header("WARC-Target-URI") or ""
                date = rec.rec_headers.get_header("WARC-Date") or ""
                text = rec.content_stream().read().decode("utf-8", "replace")
                docs.append(make_out_doc(url, text, date))
    return docs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("files", nargs="+")
    args = ap.parse_args(argv)
    from apache_beam.coders import FastPrimitivesCoder

    docs = read_docs(args.files)
    text_bytes = sum(len(d.text.encode("utf-8")) for d in docs)
    start = time.process_time()
    packed = [pack_doc(d) for d in docs]
    pack_s = time.process_time() - start
    start = time.process_time()
    unpacked = [unpack_doc(p) for p in packed]
    unpack_s = time.process_time() - start
    if unpacked != docs:
        raise SystemExit("a packed document did not round-trip")
    coder = FastPrimitivesCoder()
    key = ("train", 0)
    result = {
        "documents": len(docs),
        "text_mb": round(text_bytes / 1e6, 1),
        "pack_cpu_s": round(pack_s, 2),
        "unpack_cpu_s": round(unpack_s, 2),
        "pack_mb_per_cpu_s": round(text_bytes / 1e6 / pack_s, 1),
        "unpack_mb_per_cpu_s": round(text_bytes / 1e6 / unpack_s, 1),
        "pickled_plain_per_text_byte": round(
            len(pickle.dumps([(key, tuple(d)) for d in docs], protocol=5)) / text_bytes, 3
        ),
        "pickled_packed_per_text_byte": round(
            len(pickle.dumps([(key, p) for p in packed], protocol=5)) / text_bytes, 3
        ),
        "beam_plain_per_text_byte": round(
            sum(len(coder.encode((key, tuple(d)))) for d in docs) / text_bytes, 3
        ),
        "beam_packed_per_text_byte": round(
            sum(len(coder.encode((key, p))) for p in packed) / text_bytes, 3
        ),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
