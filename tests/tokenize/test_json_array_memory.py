"""A `.json` file holding one JSON array is read whole (it cannot be split unparsed: its bytes,
then their text), where JSON Lines is read in blocks (stop 40 Left 2, issue 23 class 3). A 200
MB ASCII array added 2.3x its size to the peak (6x with one emoji in it); one larger than the
machine could hold was read until the machine swapped or the kernel killed the run, no line.
Now such a file is refused by its size before the read, naming the file, the estimate, the
memory available and the conversion to JSON Lines; an array that fits packs as before, its
slabs byte-identical to the same rows given as JSON Lines. The available-memory probe
(packtool.free_memory, the one every bound asks) stands in for a small machine."""
from __future__ import annotations

import json
import os

import pytest
from conftest import GPT2
from typer.testing import CliRunner

from packtool import free_memory
from packtool.cli.app import app
from packtool.errors import PacktoolInputError
from packtool.tokenize.config import TokenizeConfig
from packtool.tokenize.pipeline import tokenize_to_cache

ROWS = [{"text": f"row {i}: " + "words of a row " * (i % 7 + 1)} for i in range(2000)]


def _files(tmp_path) -> tuple[str, str]:
    arr, lines = tmp_path / "rows.json", tmp_path / "rows.jsonl"
    arr.write_text(json.dumps(ROWS, indent=1))
    lines.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return str(arr), str(lines)


def _pack(tmp_path, path, out):
    return CliRunner().invoke(app, ["pack", path, "--tokenizer", GPT2, "-C", "512", "-o", str(tmp_path / out),
                                    "--cache-dir", str(tmp_path / "cache"), "--no-progress"])


def _shards(folder) -> dict:
    return {n: open(os.path.join(folder, n), "rb").read() for n in sorted(os.listdir(folder)) if n.endswith(".parquet")}


def test_an_array_that_fits_packs_as_its_json_lines(tmp_path, monkeypatch):
    arr, lines = _files(tmp_path)
    monkeypatch.setattr(free_memory, "available_bytes", lambda: 3 * os.path.getsize(arr))  # room, if little
    a, b = _pack(tmp_path, arr, "a"), _pack(tmp_path, lines, "b")
    assert a.exit_code == 0 and b.exit_code == 0, a.output + b.output
    shards = _shards(tmp_path / "a")
    assert shards and shards == _shards(tmp_path / "b")


def _refused(line: str, arr: str) -> None:
    size = os.path.getsize(arr)
    assert line.startswith(f"{arr}: a JSON array is read whole"), line
    assert f"needs at least {2 * size / (1 << 20):.1f} MiB" in line and f"over the {size / (1 << 20):.1f} MiB" in line
    assert "convert it to JSON Lines" in line and f"{arr} > {arr[:-5]}.jsonl" in line and "jq -cn --stream" in line


@pytest.mark.parametrize("how", ["pack", "pack --dry-run", "library"])
def test_an_array_that_cannot_fit_is_refused_before_the_read(tmp_path, monkeypatch, how):
    arr, _ = _files(tmp_path)
    monkeypatch.setattr(free_memory, "available_bytes", lambda: os.path.getsize(arr))  # under 2x the file
    read = []
    monkeypatch.setattr("packtool.tokenize.text_readers.raw_decode", lambda *a: read.append(a))
    if how == "library":
        with pytest.raises(PacktoolInputError) as e:
            tokenize_to_cache([arr], TokenizeConfig(tokenizer=GPT2), str(tmp_path / "cache"), progress=False)
        _refused(str(e.value), arr)
    else:
        extra = ["--dry-run"] if "dry" in how else []
        r = CliRunner().invoke(app, ["pack", arr, "--tokenizer", GPT2, "-C", "512", "-o", str(tmp_path / "out"),
                                     "--cache-dir", str(tmp_path / "cache"), "--no-progress", *extra])
        assert r.exit_code == 2 and "Traceback" not in r.output, r.output
        errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1, r.stderr
        _refused(errors[0][len("error: "):], arr)
        assert not (tmp_path / "out").exists()
    assert not read  # no row was parsed
    assert not (tmp_path / "cache").exists() or not os.listdir(tmp_path / "cache")


def test_json_lines_in_a_json_file_is_read_in_blocks_so_not_refused(tmp_path, monkeypatch):
    """The neighbour: a .json file that holds JSON Lines is read in blocks, whatever its size."""
    _, lines = _files(tmp_path)
    as_json = tmp_path / "lines.json"
    as_json.write_bytes(open(lines, "rb").read())
    monkeypatch.setattr(free_memory, "available_bytes", lambda: os.path.getsize(as_json) // 2)
    r = _pack(tmp_path, str(as_json), "c")
    assert r.exit_code == 0, r.output
