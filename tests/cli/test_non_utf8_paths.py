"""S44-4: a path whose name is not valid UTF-8 (a Linux file name in another locale's bytes, held
by Python as surrogate escapes) never ends as a bare codec error naming nothing. An input of
every kind pyarrow opens (Parquet, Arrow IPC file and stream, zstd JSON lines) is read through
Python's own file and packs and verifies; an --output under which the Parquet writer cannot
create shards is refused before any work, in one line naming --output and the path as its
bytes (`o_\\xfe`), kind output, exit 2."""
from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.feather  # noqa: F401  (pa.feather)
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.errors import shown

runner = CliRunner()
BAD = "\udcfe"  # the byte 0xfe of a name, as Python holds it (os.fsdecode)
ROWS = pa.table({"input_ids": pa.array([[1, 2, 3, 4], [5, 6, 7]], pa.list_(pa.int32()))})


def _write(tmp_path, kind: str) -> str:
    p = os.path.join(str(tmp_path), f"p{BAD}.{kind.split('-')[0]}")
    if kind == "parquet":
        pq.write_table(ROWS, _plain(tmp_path, "x.parquet"))
    elif kind == "arrow-file":
        with ipc.new_file(_plain(tmp_path, "x.arrow"), ROWS.schema) as w:
            w.write_table(ROWS)
    elif kind == "arrow-stream":
        with ipc.new_stream(_plain(tmp_path, "x.arrow"), ROWS.schema) as w:
            w.write_table(ROWS)
    else:
        text = "".join(json.dumps(r) + "\n" for r in ROWS.to_pylist()).encode()
        with pa.CompressedOutputStream(_plain(tmp_path, "x.zst"), "zstd") as f:
            f.write(text)
        p = os.path.join(str(tmp_path), f"p{BAD}.jsonl.zst")
    os.rename(next(os.path.join(str(tmp_path), n) for n in os.listdir(tmp_path) if n.startswith("x.")), p)
    return p


def _plain(tmp_path, name: str) -> str:
    return os.path.join(str(tmp_path), name)


@pytest.mark.parametrize("kind", ["parquet", "arrow-file", "arrow-stream", "jsonl-zst"])
def test_an_input_not_named_in_utf8_packs_and_verifies(tmp_path, kind):
    src = _write(tmp_path, kind)
    out = str(tmp_path / "out")
    cache = ["--cache-dir", str(tmp_path / "cache")]
    r = runner.invoke(app, ["pack", src, "-C", "16", "-o", out, "--no-progress", "-q", *cache])
    assert r.exit_code == 0, r.stdout + r.stderr
    v = runner.invoke(app, ["verify", out, "--source", src, *cache])
    assert v.exit_code == 0, v.stdout + v.stderr


@pytest.mark.parametrize("ext", ["parquet", "arrow"])
def test_a_lengths_file_not_named_in_utf8_is_read(tmp_path, ext):
    p = str(tmp_path / f"l{BAD}.{ext}")
    t = pa.table({"length": pa.array([5, 9, 3], pa.int64())})
    plain = str(tmp_path / f"l.{ext}")
    pq.write_table(t, plain) if ext == "parquet" else pa.feather.write_feather(t, plain)
    os.rename(plain, p)
    for args in (["plan", "--lengths", p, "-C", "16"], ["inspect", "--lengths", p, "-C", "16"]):
        r = runner.invoke(app, args)
        assert r.exit_code == 0 and "3" in r.stdout, r.stdout + r.stderr


def test_an_output_not_named_in_utf8_is_refused_before_any_work(tmp_path):
    src = str(tmp_path / "in.parquet")
    pq.write_table(ROWS, src)
    out = str(tmp_path / f"o_{BAD}")
    r = runner.invoke(app, ["pack", src, "-C", "16", "-o", out, "--no-progress", "--json",
                            "--cache-dir", str(tmp_path / "cache")])
    assert r.exit_code == 2, r.stdout + r.stderr
    e = json.loads(r.stdout)["error"]
    assert (e["kind"], e["flag"], e["path"]) == ("output", "--output", out), e
    assert "o_\\xfe: is not valid UTF-8" in e["message"] and BAD not in e["message"], e
    assert not os.path.lexists(out) and not os.path.exists(tmp_path / "cache")  # nothing tokenized
    plain = runner.invoke(app, ["pack", src, "-C", "16", "-o", out, "--no-progress"])
    assert plain.exit_code == 2 and "o_\\xfe" in plain.stderr and "Traceback" not in plain.stderr, plain.stderr


def test_a_cache_dir_not_named_in_utf8_is_refused_before_any_work(tmp_path):
    src = str(tmp_path / "in.parquet")
    pq.write_table(ROWS, src)
    cache = str(tmp_path / f"c{BAD}")
    r = runner.invoke(app, ["pack", src, "-C", "16", "-o", str(tmp_path / "o"), "--no-progress", "--json",
                            "--cache-dir", cache])
    assert r.exit_code == 2, r.stdout + r.stderr
    e = json.loads(r.stdout)["error"]
    assert (e["kind"], e["flag"]) == ("cache", "--cache-dir") and "c\\xfe" in e["message"], e
    assert not os.path.lexists(cache) and not os.path.lexists(tmp_path / "o")


def test_a_name_in_another_locale_is_shown_as_its_bytes():
    assert shown(f"o_{BAD}\udc80") == "o_\\xfe\\x80"
    assert shown("\ud800") == "\\ud800"  # a lone surrogate that is no escaped byte
