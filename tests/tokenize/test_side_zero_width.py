"""S39-2: a K-wide side column of K=0 (every token's list empty) is refused on every path that
takes side columns, in one line that says so: `pack` called `[[]]` per token "null" (there was
none) and `packtool.online` packed an [L, 0] tensor its own kernels refuse. K is the first token
list's length or the fixed_size_list's size; K >= 1, as the manifest's `width` and the kernels."""
from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from packtool.cli.app import app

IDS = [[1, 2, 3, 4, 5], [6, 7, 8]]
MASK = [[0, 1, 1, 1, 1], [0, 1, 1]]
# every input form a K-wide column can take: (file kind, values, arrow type or None for JSON, flag, spec)
CASES = {
    "json-unpinned": ("jsonl", [[[]] * 5, [[]] * 3], None, "--side-columns", "x"),
    "json-pinned (the finding)": ("jsonl", [[[]] * 5, [[]] * 3], None, "--side-columns", "x:int32"),
    "json-support": ("jsonl", [[[]] * 5, [[]] * 3], None, "--support-columns", "x"),
    "parquet-list-of-lists": ("parquet", [[[]] * 5, [[]] * 3], pa.list_(pa.list_(pa.int32())), "--side-columns", "x"),
    "parquet-first-token-empty": ("parquet", [[[]] + [[1, 2]] * 4, [[1, 2]] * 3], pa.list_(pa.list_(pa.float32())),
                                  "--side-columns", "x"),
    # Parquet cannot read a fixed_size_list<0> back (pyarrow's own error); an Arrow IPC file can
    "arrow-fixed_size_list-0": ("arrow", [[[]] * 5, [[]] * 3], pa.list_(pa.list_(pa.int64(), 0)),
                                "--side-columns", "x"),
}


def _input(tmp_path, kind, values, typ) -> str:
    path = str(tmp_path / f"rows.{kind}")
    if kind == "jsonl":
        with open(path, "w") as f:
            f.writelines(json.dumps({"input_ids": i, "loss_mask": m, "x": v}) + "\n" for i, m, v in zip(IDS, MASK, values))
    elif kind == "arrow":
        t = pa.table({"input_ids": IDS, "loss_mask": MASK, "x": pa.array(values, typ)})
        with pa.OSFile(path, "wb") as f, pa.ipc.new_file(f, t.schema) as w:
            w.write_table(t)
    else:
        pq.write_table(pa.table({"input_ids": IDS, "loss_mask": MASK, "x": pa.array(values, typ)}), path)
    return path


@pytest.mark.parametrize("case", list(CASES))
def test_pack_refuses_a_side_column_of_zero_width(tmp_path, monkeypatch, case):
    kind, values, typ, flag, spec = CASES[case]
    monkeypatch.chdir(tmp_path)
    src = _input(tmp_path, kind, values, typ)
    before = open(src, "rb").read()
    r = CliRunner().invoke(app, ["pack", src, flag, spec, "-C", "64", "-o", "out", "--cache-dir", "made/cache",
                                 "--json", "-q"])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, r.stderr
    assert "side column x: token 0 holds 0 values; a K-wide row needs K >= 1" in lines[0], lines[0]
    assert f"drop x from {flag}" in lines[0] and "null" not in lines[0], lines[0]
    err = json.loads(r.stdout)["error"]
    assert (err["path"], err["row"], err["column"], err["token"], err["flag"]) == (src, 0, "x", 0, flag), err
    assert open(src, "rb").read() == before
    assert sorted(os.listdir(tmp_path)) == [os.path.basename(src)]  # no output, no --cache-dir folder made


def test_a_null_candidate_is_still_called_null(tmp_path, monkeypatch):
    """The K check comes before the null check, and only refuses K=0: a token of nulls is a null."""
    monkeypatch.chdir(tmp_path)
    src = _input(tmp_path, "jsonl", [[[None, None]] * 5, [[1, 2]] * 3], None)
    r = CliRunner().invoke(app, ["pack", src, "--side-columns", "x:int32", "-C", "64", "-o", "out",
                                 "--cache-dir", "made/cache", "-q"])
    assert r.exit_code == 2 and "null" in r.stderr and "K >= 1" not in r.stderr, r.output


torch = pytest.importorskip("torch", reason="online batches are torch tensors")


def _online(entry):
    from packtool.online import pack_tensors
    if entry == "pack_tensors":
        return pack_tensors
    pytest.importorskip("megatron.core", reason="ThdBatch carries megatron's PackedSeqParams")
    from packtool.online import thd_batch
    from packtool.online.thd import thd_batches
    if entry == "thd_batch":
        return thd_batch
    return lambda ids, al, mask, side, **kw: thd_batches(ids, al, [list(range(len(ids)))], loss_mask=mask, side=side,
                                                        **kw)[0]


@pytest.mark.parametrize("form", ["per-sequence", "flat"])
@pytest.mark.parametrize("entry", ["pack_tensors", "thd_batch", "thd_batches"])
def test_online_refuses_a_side_column_of_zero_width(entry, form):
    from packtool.align import Alignment
    from packtool.online import OnlinePackError
    ids = [torch.arange(1, 11), torch.arange(1, 7)]
    mask = [torch.ones(10, dtype=torch.long), torch.ones(6, dtype=torch.long)]
    side = [torch.zeros(10, 0, dtype=torch.int32), torch.zeros(6, 0, dtype=torch.int32)]
    kw = {"cp_size": 1}  # the whole slab
    if form == "flat":
        if entry == "thd_batches":
            pytest.skip("thd_batches has no flat form")
        ids, mask, side, kw = torch.cat(ids), torch.cat(mask), torch.cat(side), {**kw, "lengths": [10, 6]}
    with pytest.raises(OnlinePackError) as e:
        _online(entry)(ids, Alignment(cp=2, capacity=1024), mask, side={"s": side}, **kw)
    msg = str(e.value)
    assert "\n" not in msg and "side['s']" in msg and "K >= 1" in msg, msg
