"""S46B-4: an RL output (pack --side-columns / --support-columns) through docs/HF.md's recipe,
`SlabCollator()` without side_columns=, lost its side columns without a word (every rollout
trained as SFT, the negative-advantage ones too), where `packtool train` on the same output says
so in a note. The collator now says it once: naming the columns it leaves out and
`side_columns=ds.side_columns`; nothing where it is given them, or the output has none. Over
every source of a collator's items: SlabDataset, to_hf (a datasets.Dataset, and streaming), raw
Parquet rows."""
from __future__ import annotations

import pyarrow.parquet as pq
import pytest

pytest.importorskip("torch")

from side_support import side_rows, write_input  # noqa: E402
from slab_support import write_pack  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from packtool import notes  # noqa: E402
from packtool.align import Alignment  # noqa: E402
from packtool.cli.app import app  # noqa: E402
from packtool.hf import SlabCollator, SlabDataset  # noqa: E402


@pytest.fixture(scope="module")
def rl(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rl")
    ids, lp, sup = side_rows(n=30, seed=3, long=100)
    inp = write_input(str(tmp / "in.parquet"), ids, lp, sup)
    out = str(tmp / "out")
    res = CliRunner().invoke(app, ["pack", inp, "--shape", "tokens", "--side-columns", "lp", "--support-columns",
                                   "sup", "--output", out, "--cache-dir", str(tmp / "cache"), "--no-progress",
                                   "--max-tokens", "256"])
    assert res.exit_code == 0, res.output
    return out


def _datasets(out, tmp_path, streaming):
    pytest.importorskip("datasets", reason="the hf extra is not installed")
    h = SlabDataset(out).to_hf(streaming=streaming, **({} if streaming else {"cache_dir": str(tmp_path / "hfc")}))
    return [next(iter(h)) for _ in range(2)] if streaming else [h[0], h[1]]


SOURCES = {
    "SlabDataset items": lambda out, tmp: [SlabDataset(out)[0], SlabDataset(out)[1]],
    "to_hf rows": lambda out, tmp: _datasets(out, tmp, False),
    "to_hf(streaming=True) rows": lambda out, tmp: _datasets(out, tmp, True),
    "raw Parquet rows": lambda out, tmp: pq.read_table(f"{out}/{SlabDataset(out).manifest.shards[0]}").to_pylist()[:2],
}


def _said(start):
    return [n for n in notes.since(start) if n.startswith("SlabCollator: the slabs carry side column")]


@pytest.mark.parametrize("source", SOURCES)
def test_a_collator_without_side_columns_says_once_what_it_leaves_out(rl, tmp_path, source):
    items = SOURCES[source](rl, tmp_path)
    start = notes.mark()
    col = SlabCollator()
    for it in items:  # two batches: said once
        assert "lp" not in col([it])
    said = _said(start)
    assert len(said) == 1 and "side column(s) lp, sup," in said[0] and "side_columns=ds.side_columns" in said[0], said


@pytest.mark.parametrize("source", SOURCES)
def test_a_collator_given_them_says_nothing_and_one_given_by_name_names_the_rest(rl, tmp_path, source):
    items = SOURCES[source](rl, tmp_path)
    start = notes.mark()
    assert "shift_lp" in SlabCollator(side_columns=SlabDataset(rl).side_columns)(items)
    assert _said(start) == []
    SlabCollator(side_columns=["lp"])(items)
    said = _said(start)
    assert len(said) == 1 and "side column(s) sup," in said[0], said


def test_an_output_without_side_columns_says_nothing(tmp_path):
    out = write_pack(str(tmp_path / "p"), [40, 70, 90], Alignment(capacity=128))[0]
    start = notes.mark()
    SlabCollator()([SlabDataset(out)[0]])
    assert _said(start) == []
