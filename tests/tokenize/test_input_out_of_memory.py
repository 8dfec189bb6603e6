"""RB-10: a memory mapping the address space could not hold (`ulimit -v`: Arrow's "Memory mapping
file failed: Cannot allocate memory", no errno) was no out of memory for free_memory's rule: pack
of an Arrow IPC input said "cannot read arrow file", kind input, naming no limit and no fix (to_hf
blamed its cache_dir keyword: tests/slabs/test_decode_out_of_memory.py's mmap form). An input's
allocation refused in Parquet's decoder (std::bad_alloc in an OSError) was "cannot read Parquet"
the same way. Every reader door of an input now asks free_memory's one rule: a MemoryError naming
the file, the limit and how that kind is read in less memory; on the command line kind resources.

The real thing (an 8 GiB sparse .arrow under RLIMIT_AS 4 GiB) is /tmp/revB/arrow_input_mmap.py."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from packtool.errors import PacktoolError
from packtool.tokenize import readers
from packtool.tokenize.readers import InputFile

FORMS = {
    "mmap": lambda: OSError("Memory mapping file failed: Cannot allocate memory"),
    "ENOMEM": lambda: OSError(12, "Cannot allocate memory"),
    "bad_alloc": lambda: OSError("Couldn't deserialize thrift: std::bad_alloc"),
}


def _input(tmp_path, kind: str) -> str:
    t = pa.table({"text": ["a b c", "d e"]})
    path = str(tmp_path / f"rows.{kind}")
    if kind == "parquet":
        pq.write_table(t, path)
    else:
        with ipc.new_file(path, t.schema) as w:
            w.write_table(t)
    return path


def _fail(monkeypatch, kind: str, form: str):
    def fail(*a, **k):
        raise FORMS[form]()
    if kind == "arrow":  # mapped whole where it is opened
        monkeypatch.setattr(readers.pa, "memory_map", fail)
    else:
        monkeypatch.setattr(pq.ParquetFile, "__init__", fail)


DOORS = {"columns": lambda f: readers.peek_columns(f), "rows": lambda f: list(readers.iter_batches(f, 64))}


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("kind", ["arrow", "parquet"])
def test_an_input_refused_memory_is_out_of_memory_at_every_reader_door(tmp_path, monkeypatch, kind, door, form):
    path = _input(tmp_path, kind)
    _fail(monkeypatch, kind, form)
    with pytest.raises(MemoryError) as e:
        DOORS[door](InputFile(path, kind))
    msg = str(e.value)
    assert not isinstance(e.value, PacktoolError), msg
    assert "out of memory" in msg and path in msg and "\n" not in msg and "not at fault" in msg, msg
    fix = "convert it to Parquet or JSON Lines" if kind == "arrow" else "smaller row groups"
    assert fix in msg and "cannot read" not in msg, msg


@pytest.mark.parametrize("kind", ["arrow", "parquet"])
def test_pack_says_it_kind_resources(tmp_path, monkeypatch, capsys, kind):
    from cli_main import run_main
    path = _input(tmp_path, kind)
    _fail(monkeypatch, kind, "mmap")
    assert run_main(monkeypatch, ["--json", "pack", path, "--dry-run", "-C", "128",
                                  "--cache-dir", str(tmp_path / "c")]) == [2]
    cap = capsys.readouterr()
    err = [line for line in cap.err.splitlines() if line.startswith("error: ")]
    assert len(err) == 1 and "out of memory" in err[0] and "rows." in err[0], cap.err
    # the input's own cause and fix, not the stage's guess (a .json array, a row of hundreds of MiB)
    assert ".json array" not in err[0] and ("smaller row groups" in err[0] or "Parquet or JSON Lines" in err[0]), err
    said = json.loads(cap.out.strip().splitlines()[-1])["error"]
    assert said["kind"] == "resources" and said["exit_code"] == 2 and said["path"] == path, said


def test_a_mapping_refused_anywhere_else_is_the_resources_line(monkeypatch):
    """A file mapped by numpy or mmap (the flat token store, a plan's lengths) past the limit: an
    OSError ENOMEM that no reader translated is still the command's out-of-memory line."""
    from packtool.cli.failure import describe
    kind, line, code = describe(OSError(12, "Cannot allocate memory"))
    assert (kind, code) == ("resources", 2) and "out of memory" in line, line
