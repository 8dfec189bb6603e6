"""inspect lists a packed output's side columns, their fill share and a float column's NaN /
+-inf values (text, --json, --html); the figures are counted straight from the shards."""
from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from side_support import K
from side_support import side_output as packed  # noqa: F401  (the module's fixture)
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.inspection.packed import inspect_packed


def _direct(out: str):
    t = pq.read_table(out)
    n = real_n = 0
    fill = {"lp": 0, "sup": 0}
    odd = [0, 0]
    on_real = {"lp": 0, "sup": 0}
    for row in t.to_pylist():
        T = len(row["input_ids"])
        real = np.zeros(T, bool)
        for a, m in zip(row["cu_seqlens_padded"][:-1], row["seq_lens"]):
            real[a:a + m] = True
        odd[0] += int(np.isnan(row["lp"]).sum())
        odd[1] += int(np.isinf(row["lp"]).sum())
        lp = np.asarray(row["lp"]) == 0.0
        sup = (np.asarray(row["sup"]).reshape(T, K) == -1).all(axis=1)
        for k, f in (("lp", lp), ("sup", sup)):
            fill[k] += int(f.sum())
            on_real[k] += int((f & real).sum())
        n, real_n = n + T, real_n + int(real.sum())
    return n, real_n, fill, on_real, odd


def test_inspect_counts_the_fill_of_every_side_column(packed):
    r = inspect_packed(packed, what_if=False)
    n, real_n, fill, on_real, odd = _direct(packed)
    got = {c.name: c for c in r.side_columns}
    assert list(got) == ["lp", "sup"] and got["sup"].kind == "support" and got["sup"].width == K
    for k in ("lp", "sup"):
        c = got[k]
        assert (c.positions, c.real_tokens, c.fill_positions, c.fill_on_real) == (n, real_n, fill[k], on_real[k])
        assert c.fill_share == pytest.approx(fill[k] / n)
    assert got["sup"].fill_on_real > 0 and got["sup"].fill_positions > n - real_n  # pads + tokens without support
    assert odd == [1, 1] and [got["lp"].nan, got["lp"].inf] == odd and (got["sup"].nan, got["sup"].inf) == (0, 0)


def test_inspect_text_json_and_html_show_them(packed, tmp_path):
    res = CliRunner().invoke(app, ["inspect", packed, "--json", "--no-what-if"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert [c["name"] for c in d["side_columns"]] == ["lp", "sup"] and 0 < d["side_columns"][1]["fill_share"] < 1
    assert (d["side_columns"][0]["nan"], d["side_columns"][0]["inf"]) == (1, 1)
    res = CliRunner().invoke(app, ["inspect", packed, "--no-what-if"], env={"COLUMNS": "160"})
    assert res.exit_code == 0 and "Side columns" in res.output and "sup" in res.output, res.output
    assert "NaN / inf" in res.output and "1 / 1" in res.output, res.output
    html = str(tmp_path / "r.html")
    res = CliRunner().invoke(app, ["inspect", packed, "--html", html, "--no-what-if"])
    assert res.exit_code == 0, res.output
    text = open(html).read()
    assert "<h2>Side columns</h2>" in text and ">sup<" in text
