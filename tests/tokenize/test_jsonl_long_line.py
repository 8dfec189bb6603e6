"""S34-3: a JSON Lines line gathered over many reads (the column peek reads 64 KiB blocks) is
searched and joined once, not rescanned from its start on every read: the bytes packtool's
own searches go over stay a small multiple of the file, for a line under the bound (read) and
one over it (refused naming the line), plain and compressed. Counted, not timed: every bytes
find/rfind/count/index/split call is heard through sys.setprofile with the object it scans."""
from __future__ import annotations

import bz2
import gzip

import pytest
from scan_counts import bytes_searched

import packtool.tokenize.text_readers as text_readers
from packtool.errors import PacktoolError
from packtool.tokenize.readers import peek_columns, resolve_inputs

_BOUND = 4 << 20


def _write(path, body: bytes) -> None:
    opener = {".gz": gzip.open, ".bz2": bz2.open}.get(path.suffix)
    with (opener(path, "wb") if opener else open(path, "wb")) as f:
        f.write(body)


@pytest.mark.parametrize("read", ["peek", "rows"])
@pytest.mark.parametrize("over", [False, True])
@pytest.mark.parametrize("name", ["d.jsonl", "d.jsonl.gz", "d.jsonl.bz2"])
def test_a_long_first_line_is_scanned_once(tmp_path, monkeypatch, name, over, read):
    monkeypatch.setattr(text_readers, "MAX_JSON_LINE", _BOUND)
    monkeypatch.setattr(text_readers, "_JSONL_BLOCK", 1 << 14)  # the rows' reads span the line too
    n = _BOUND + (1 << 20) if over else _BOUND - (1 << 20)
    p = tmp_path / name
    _write(p, b'{"text": "' + b"a" * n + b'"}\n{"text": "b"}\n')
    f = resolve_inputs([str(p)])[0]
    if read == "peek":
        scanned, out = bytes_searched(lambda: peek_columns(f), PacktoolError)
    else:
        scanned, out = bytes_searched(lambda: list(text_readers.jsonl_batches(f.path, 64, None)), PacktoolError)
    if over:
        assert isinstance(out, PacktoolError) and "line 1 is longer than 4.0 MiB" in str(out), out
    else:
        assert not isinstance(out, Exception), out
    assert scanned < 4 * n, f"{scanned} bytes searched for a {n}-byte line"
