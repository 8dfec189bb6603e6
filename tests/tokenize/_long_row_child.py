"""The child of tests/tokenize/test_long_row_refused.py: the tokenizer under an address-space
limit (RLIMIT_AS, what `ulimit -v` sets), in a process of its own because a row the tokenizer
cannot hold aborts the process it runs in (a Rust allocation failure) unless packtool refuses
the row first. Prints one JSON object per case; an abort ends the output early.

Usage: python _long_row_child.py TOKENIZER_JSON
"""
from __future__ import annotations

import json
import resource
import sys

from tokenizers import Tokenizer

from packtool.tokenize import long_rows
from packtool.tokenize.encode import start_encode
from packtool.tokenize.shapes import RenderedBatch

ROOM = 512 << 20   # address space left to the process
BIG = 48 << 20     # a row whose offsets alone (16 bytes a byte of text) need more than ROOM


def _batch(texts, spans):
    return RenderedBatch(list(texts), [[(0, len(t))] if spans else None for t in texts], [False] * len(texts))


def main(path: str) -> None:
    tok = Tokenizer.from_file(path)
    small = ["hello world " * 50, "a short row"]
    want = [e.ids for e in tok.encode_batch(small, add_special_tokens=False)]  # the pool started before the limit
    big = "ab " * (BIG // 3)
    probes = []
    probe = long_rows._encodes_in_child
    long_rows._encodes_in_child = lambda *a: probes.append(1) or probe(*a)
    used = long_rows._kib("/proc/self/status", "VmSize")
    resource.setrlimit(resource.RLIMIT_AS, (used + ROOM, resource.RLIM_INFINITY))
    for spans in (False, True):
        try:
            start_encode(tok, _batch([small[0], big], spans))
            out = {"case": f"too long, spans={spans}", "refused": None}
        except long_rows.RowTooLongError as e:
            out = {"case": f"too long, spans={spans}", "refused": str(e)}
        print(json.dumps(out), flush=True)
        long_rows._DOUBT, before = 1 << 40, len(probes)  # every row in doubt: each is encoded in a child first
        got = [e.ids for e in start_encode(tok, _batch(small, spans))]
        long_rows._DOUBT = 64
        print(json.dumps({"case": f"fits, probed, spans={spans}", "same": got == want,
                          "probes": len(probes) - before}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
