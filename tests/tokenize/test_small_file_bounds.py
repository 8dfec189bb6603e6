"""S32-9, S32-20: what packtool reads whole is bounded. A file small by nature (manifest,
tokenizer_config.json, chat template, datasets state.json, cache.json) over its bound, a
lengths text file of NULs, and one JSON line over the line bound are each refused before they
are read whole, naming the file (and the line): never a bare out-of-memory. The big files are
sparse (no disk used); with the bounds in place none is read."""
from __future__ import annotations

import gzip
import os
import re
import tracemalloc

import pytest

import packtool.tokenize.text_readers as text_readers
from packtool.errors import PacktoolError
from packtool.planning.lengths import load_lengths
from packtool.slabs.format import MANIFEST_BYTES, read_manifest
from packtool.tokenize.cache import read_cache_json
from packtool.tokenize.config import TokenizeConfig
from packtool.tokenize.encode import load_tokenizer
from packtool.tokenize.json_depth import SETTINGS_BYTES
from packtool.tokenize.readers import iter_batches, resolve_inputs
from packtool.tokenize.templates import load_template


def _sparse(path, size: int) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)
    return str(path)


def _manifest(tmp_path):
    _sparse(tmp_path / "out" / ".manifest.json", MANIFEST_BYTES + 1)
    return lambda: read_manifest(str(tmp_path / "out")), tmp_path / "out" / ".manifest.json"


def _store_manifest(tmp_path):  # the object-store route, through a file:// URI
    _sparse(tmp_path / "out" / ".manifest.json", MANIFEST_BYTES + 1)
    return lambda: read_manifest(f"file://{tmp_path}/out"), tmp_path / "out" / ".manifest.json"


def _tokenizer_config(tmp_path):
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").write_text("{}")
    p = _sparse(tmp_path / "tok" / "tokenizer_config.json", SETTINGS_BYTES + 1)
    return lambda: load_tokenizer(str(tmp_path / "tok"), TokenizeConfig()), p


def _template(tmp_path):
    p = _sparse(tmp_path / "t.jinja", SETTINGS_BYTES + 1)
    return lambda: load_template(p, None), p


def _hf_state(tmp_path):
    p = _sparse(tmp_path / "ds" / "state.json", SETTINGS_BYTES + 1)
    (tmp_path / "ds" / "dataset_info.json").write_text("{}")
    return lambda: resolve_inputs([str(tmp_path / "ds")]), p


def _cache_json(tmp_path):
    p = _sparse(tmp_path / "c" / "cache.json", (256 << 20) + 1)
    return lambda: read_cache_json(str(tmp_path / "c")), p


def _lengths(name):
    def make(tmp_path):
        p = _sparse(tmp_path / name, 3 << 20)
        return lambda: load_lengths(p), p
    return make


def _train_config(tmp_path):
    from packtool.megatron.train_cli import _yaml_shape
    p = _sparse(tmp_path / "m.yaml", SETTINGS_BYTES + 1)
    return lambda: _yaml_shape(p), p


def _tokenizer_json(tmp_path):
    from packtool.tokenize.encode import TOKENIZER_BYTES
    p = _sparse(tmp_path / "tok" / "tokenizer.json", TOKENIZER_BYTES + 1)
    return lambda: load_tokenizer(str(tmp_path / "tok"), TokenizeConfig()), p


def _store_cache_json_read(tmp_path):  # read_cache_json's store route
    from packtool.tokenize.cache import CACHE_JSON_BYTES
    p = _sparse(tmp_path / "c" / "cache.json", CACHE_JSON_BYTES + 1)
    return lambda: read_cache_json(f"file://{tmp_path}/c"), p


def _output_store_manifest(tmp_path):  # pack -o s3://...: the previous output's manifest
    from packtool.output.store import read_store_manifest
    from packtool.storage import locate
    p = _sparse(tmp_path / "out" / ".manifest.json", MANIFEST_BYTES + 1)
    return lambda: read_store_manifest(locate(f"file://{tmp_path}/out")), p


SMALL = {"train --config": _train_config, "tokenizer.json": _tokenizer_json,
         "store cache.json read": _store_cache_json_read, "output store manifest": _output_store_manifest,
         "manifest": _manifest, "store manifest": _store_manifest, "tokenizer_config": _tokenizer_config, "chat template": _template,
         "hf state.json": _hf_state, "cache.json": _cache_json,
         **{f"lengths {e}": _lengths(f"l{e}") for e in (".txt", ".csv", ".tsv", ".jsonl")}}


@pytest.mark.parametrize("case", sorted(SMALL))
def test_a_file_over_its_bound_is_refused_by_name_before_reading(tmp_path, case):
    call, path = SMALL[case](tmp_path)
    tracemalloc.start()
    try:
        with pytest.raises(PacktoolError) as e:
            call()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, f"{peak} bytes allocated before the refusal"  # nothing of the file read whole
    assert str(e.value).startswith(str(path)) or str(path) in str(e.value), str(e.value)
    assert re.search(r"over the [\d.]+ MiB any|is NUL: not a text file|cache\.json cannot be read", str(e.value))


def _jsonl(path, body: bytes) -> None:
    if str(path).endswith(".gz"):
        with gzip.open(path, "wb") as f:
            f.write(body)
    else:
        path.write_bytes(body)


@pytest.mark.parametrize("name", ["d.jsonl", "d.jsonl.gz", "d.ndjson", "l.jsonl"])
@pytest.mark.parametrize("newline_after", [True, False])
def test_a_json_line_over_the_bound_is_refused_naming_file_and_line(tmp_path, monkeypatch, name, newline_after):
    monkeypatch.setattr(text_readers, "MAX_JSON_LINE", 1 << 18, raising=False)
    monkeypatch.setattr(text_readers, "_JSONL_BLOCK", 1 << 16)  # the line spans many reads
    p = tmp_path / name
    _jsonl(p, b'{"text": "ok", "length": 1}\n{"text": "' + b"a" * (1 << 19) + b'"}' + (b"\n" if newline_after else b""))
    with pytest.raises(PacktoolError) as e:
        if name.startswith("l."):
            load_lengths(str(p))
        else:
            for f in resolve_inputs([str(p)]):
                for _ in iter_batches(f, 1000):
                    pass
    assert re.search(rf"^{re.escape(str(p))}: line 2 is longer than 0\.2 MiB.*split that row", str(e.value)), str(e.value)


def test_a_line_under_the_bound_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(text_readers, "MAX_JSON_LINE", 1 << 18, raising=False)
    monkeypatch.setattr(text_readers, "_JSONL_BLOCK", 1 << 16)  # the line spans many reads
    p = tmp_path / "d.jsonl"
    p.write_bytes((b'{"text": "' + b"a" * ((1 << 18) - 20) + b'"}\n') * 3)
    rows = sum(b.num_rows for f in resolve_inputs([str(p)]) for b in iter_batches(f, 1000))
    assert rows == 3 and os.path.getsize(p) > 1 << 18


def _intent(tmp_path, pad: int):
    from packtool.slabs.names import read_intents
    name = ".packtool-pending-0123456789ab.json"
    (tmp_path / name).write_bytes(b'{"new": ["slabs-00000.parquet"], "old": []}' + b" " * pad)
    return read_intents(f"file://{tmp_path}")[name]


def _store_cache_json(tmp_path, pad: int):
    from packtool.storage import locate
    from packtool.tokenize.store_cache import recorded_files
    (tmp_path / "cache.json").write_bytes(b'{"checksums": {"part": "x"}}' + b" " * pad)
    return recorded_files(locate(f"file://{tmp_path}"))


def _lease(tmp_path, pad: int):
    from packtool.storage import locate
    from packtool.storage.lease import LEASE, _read
    (tmp_path / LEASE).write_bytes(b'{"token": "t", "owner": "pid 1 on h", "renewed": 0}' + b" " * pad)
    return _read(locate(f"file://{tmp_path}").join(LEASE))


# packtool's own small objects on a store, read through storage.read_small: over the
# bound each reads as "not one packtool wrote" (the caller's existing path) instead of whole
# (storage.read_small, the bound's owner).
STORE = {"intent": (_intent, "packtool.slabs.names.INTENT_BYTES", None),
         "store cache.json": (_store_cache_json, "packtool.tokenize.store_cache.META_BYTES", []),
         "lease": (_lease, "packtool.storage.lease.LEASE_BYTES", {})}


@pytest.mark.parametrize("case", sorted(STORE))
def test_a_store_object_over_its_bound_is_not_read_whole(tmp_path, monkeypatch, case):
    read, bound, over = STORE[case]
    monkeypatch.setattr(bound, 1 << 12, raising=False)
    assert read(tmp_path, 100) not in (over, None, [])  # under the bound: read as before
    assert read(tmp_path, 1 << 13) == over


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    from conftest import gsm8k_output
    return str(gsm8k_output(tmp_path_factory.mktemp("bounds")) / "out")


CLI = {  # flag -> the command line, given an oversized file and a packed output
    "train --config": lambda big, out: ["train", out, "--device", "cpu", "--steps", "1", "--config", big],
    "pack --tokenizer": lambda big, out: ["pack", os.path.join(out, "..", "in.jsonl"), "--tokenizer", big,
                                          "--dry-run", "-q"],
    "pack --chat-template": lambda big, out: ["pack", os.path.join(out, "..", "in.jsonl"), "--tokenizer",
                                              os.path.join(os.path.dirname(os.path.dirname(__file__)), "..",
                                                           "fixtures", "tokenizers", "gpt2"),
                                              "--chat-template", big, "--dry-run", "-q"],
}


@pytest.mark.parametrize("case", sorted(CLI))
def test_the_cli_says_one_line_naming_the_oversized_file(tmp_path, packed, case):
    """exit 2, one `error:` line naming the file and its flag, no traceback."""
    from typer.testing import CliRunner

    from packtool.cli.app import app
    with open(os.path.join(packed, "..", "in.jsonl"), "w") as f:
        f.write('{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\n')
    name = {"train --config": "m.yaml", "pack --tokenizer": "tokenizer.json", "pack --chat-template": "t.jinja"}[case]
    big = _sparse(tmp_path / name, (256 << 20) + 1)
    r = CliRunner().invoke(app, CLI[case](big, packed))
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.exit_code == 2 and len(lines) == 1, r.output
    assert lines[0].startswith(f"error: {big}: is 256.0 MiB, over the ") and case.split()[1] in lines[0], lines[0]


@pytest.mark.parametrize("where", ["local", "store"])
def test_a_small_file_costs_its_size_not_the_bound(tmp_path, where):
    """read(n) allocates n bytes up front: a 2 KB tokenizer.json read under the 256 MiB bound
    must not ask for 256 MiB (a strict-overcommit machine refuses it; tracemalloc counts it)."""
    from packtool.storage import read_small
    p = tmp_path / "tokenizer.json"
    p.write_bytes(b"{}" * 1000)
    path = str(p) if where == "local" else f"file://{p}"
    tracemalloc.start()
    try:
        data = read_small(path, 256 << 20, "tokenizer.json", "fix")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert data == b"{}" * 1000 and peak < 1 << 20, peak


def _alarm(signum, frame):
    raise TimeoutError("blocked on the special file")


@pytest.mark.parametrize("kind", ["fifo", "device"])
@pytest.mark.parametrize("case", sorted(SMALL))
def test_a_special_file_in_place_of_a_small_file_is_refused_by_kind(tmp_path, case, kind):
    """S34-5: every small file read whole (storage.read_small's callers, the lengths readers)
    refuses a FIFO (opening it would block with no writer) or a device (/dev/zero: endless)
    by its kind, naming it, at once."""
    import signal
    call, path = SMALL[case](tmp_path)
    os.remove(path)
    os.mkfifo(path) if kind == "fifo" else os.symlink("/dev/zero", path)
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(10)
    try:
        with pytest.raises(PacktoolError) as e:
            call()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert str(path) in str(e.value), str(e.value)
    assert re.search("FIFO|character device", str(e.value)) and "\n" not in str(e.value), str(e.value)
