"""`inspect`: every figure of a small hand-built case equals the value worked out by hand;
packed output, plan file and lengths agree; JSON, HTML and the table carry the same numbers."""
from __future__ import annotations

import html as htmlmod
import json
import os
import re

import numpy as np
import pytest
from slab_support import read_manifest, write_pack
from typer.testing import CliRunner

from packtool.align import Alignment
from packtool.cli.app import app
from packtool.inspection import InspectError, inspect_lengths, inspect_packed, inspect_plan_file
from packtool.inspection.figures import fmt_int, fmt_pct, inspect_figures
from packtool.packers import ATTN_COEF
from packtool.planning.core import PackingConfig, plan
from packtool.planning.plan_file import write_plan

# Hand-built case. tp=1 cp=2 fp8=tensorwise: s = 2*cp = 4, t = lcm(4, 2, 16*2) = 32; C = U = 96.
# lengths 30 17 9 40 3 -> footprints 32 20 12 40 4 (sum 108; lower bound ceil(108/96) = 2).
# FFD over footprints 40 32 20 12 4: bin0 = 40+32+20 = 92, 12 does not fit -> bin1 = 12,
# 4 -> bin0 = 96. bin0 = {40, 30, 17, 3}: 90 real, footprint 96, tail 0, gaps 0+2+3+1 = 6;
# bin1 = {9}: 9 real, 12 -> round_up(12, 32) = 32: gaps 3, tail 20, slack 96-32 = 64.
LENGTHS = [30, 17, 9, 40, 3]
ALIGN = Alignment(tp=1, cp=2, fp8="tensorwise", capacity=96)
FFD = PackingConfig("ffd")


def test_alignment_of_the_hand_case():
    assert (ALIGN.s, ALIGN.t, ALIGN.usable) == (4, 32, 96)


def test_every_figure_by_hand():
    r = inspect_lengths(LENGTHS, ALIGN, FFD)
    assert (r.sequences, r.segments, r.slabs) == (5, 5, 2)
    assert (r.lower_bound, r.l2_bound, r.excess_over_bound) == (2, 2, 0)
    assert r.real_tokens == 99 and r.loss_tokens is None
    p = r.padding
    assert (p.layout_pad, p.tail_pad, p.fill_pad, p.slack) == (9, 20, 0, 64)
    assert (r.physical_tokens, r.capacity_tokens) == (128, 192)
    assert r.efficiency == 99 / 128 and r.waste == (192 - 99) / 192
    # fill = real / U: 90/96 = 0.9375 (last bin), 9/96 = 0.094 (first bin)
    assert r.fill_histogram.counts == [1] + [0] * 8 + [1]
    # power-of-two bins up to 64: 3 in [2,4), 9 in [8,16), 17 and 30 in [16,32), 40 in [32,64)
    assert r.length_histogram.edges == [1, 2, 4, 8, 16, 32, 64]
    assert r.length_histogram.counts == [0, 1, 0, 1, 2, 1]
    w = r.worst_slabs[0]
    assert (w.segments, w.real_tokens, w.physical_tokens, w.layout_pad, w.tail_pad, w.slack) == (1, 9, 32, 3, 20, 64)
    assert w.fill == 9 / 96 and not w.singleton
    w = r.worst_slabs[1]
    assert (w.segments, w.real_tokens, w.physical_tokens, w.layout_pad, w.tail_pad, w.slack) == (4, 90, 96, 6, 0, 0)
    (rank,) = r.dp.ranks
    assert (rank.slabs, rank.real_tokens, rank.physical_tokens) == (2, 99, 128)
    assert rank.compute == pytest.approx(108 + ATTN_COEF * (900 + 289 + 81 + 1600 + 9))
    assert r.dp.compute_imbalance == 0.0


def test_what_if_by_hand():
    # tried: 96-32 = 64 and 96+32 = 128. C=64: {40,17,3} = 64 and {30,9} = 44 -> 64 (tail 20):
    # 128 physical, no slack, waste 29/128. C=128: everything in one slab of 108 -> 128,
    # waste 29/128 too; the first (64) is kept on a tie. Both beat 93/192.
    r = inspect_lengths(LENGTHS, ALIGN, FFD)
    w = r.what_if
    assert (w.flag, w.current, w.best, w.slabs, w.current_slabs) == ("--max-tokens", 96, 64, 2, 2)
    assert w.tried == [64, 128]
    assert w.waste == 29 / 128 and w.current_waste == 93 / 192


def test_no_what_if_when_nothing_nearby_is_better():
    # two sequences that fill U exactly: no padding or slack to cut
    r = inspect_lengths([64, 32], ALIGN, FFD)
    assert r.waste == 0 and r.what_if is None


def test_fixed_length_by_hand():
    # L = 160 = U: everything fits one slab: footprint round_up(108, 32) = 128, fill 32
    r = inspect_lengths(LENGTHS, Alignment(tp=1, cp=2, fp8="tensorwise", capacity=160, fixed_length=160), FFD,
                        what_if=False)
    p = r.padding
    assert (r.slabs, p.layout_pad, p.tail_pad, p.fill_pad, p.slack, r.physical_tokens) == (1, 9, 20, 32, 0, 160)
    assert r.waste == 61 / 160


def test_dp_by_hand():
    # dp=2: the two slabs go to different ranks
    r = inspect_lengths(LENGTHS, ALIGN, PackingConfig("ffd", dp=2), what_if=False)
    assert r.dp.dp == 2
    loads = sorted(r.dp.ranks, key=lambda x: x.real_tokens)
    assert [(x.slabs, x.real_tokens, x.physical_tokens) for x in loads] == [(1, 9, 32), (1, 90, 96)]
    c_small = 12 + ATTN_COEF * 81
    c_big = 96 + ATTN_COEF * (1600 + 900 + 289 + 9)
    assert [x.compute for x in loads] == pytest.approx([c_small, c_big])
    mean = (c_small + c_big) / 2
    assert r.dp.compute_imbalance == pytest.approx((c_big - mean) / mean)
    assert r.dp.token_imbalance == pytest.approx((90 - 49.5) / 49.5)
    assert r.dp.step_imbalance == pytest.approx((c_big - mean) / mean)  # one step, both ranks


def test_overflow_split_and_singletons():
    r = inspect_lengths([200, 50], ALIGN, PackingConfig("bfd", overflow="split"), what_if=False)
    # 200 -> chunks of U=96: 96, 96, 8 (the targets lost at the 2 cuts are the loss masks', L6: unknown here)
    o = r.overflow
    assert (o.policy, o.sequences, o.chunks, o.targets_lost) == ("split", 1, 3, 0)
    assert r.segments == 4 and r.sequences == 2
    r = inspect_lengths([200, 50], ALIGN, PackingConfig("mffd", overflow="singleton"), what_if=False)
    assert r.overflow.singletons == 1 and r.padding.singleton_slabs == 1
    single = next(w for w in r.worst_slabs if w.singleton)
    assert (single.real_tokens, single.physical_tokens, single.slack) == (200, 224, 0)  # round_up(200, 32)


def test_compare_grid():
    r = inspect_lengths(LENGTHS, ALIGN, FFD, compare=True, what_if=False)
    assert {(c.algorithm, c.convention) for c in r.compare} == {
        (a, c) for a in ("ffd", "bfd", "mffd", "balanced")
        for c in ("packtool", "skyrl", "nemo-rl", "verl", "per-sequence")}
    same = next(c for c in r.compare if (c.algorithm, c.convention) == ("ffd", "packtool"))
    assert (same.slabs, same.efficiency, same.waste) == (r.slabs, r.efficiency, r.waste)
    per_seq = next(c for c in r.compare if (c.algorithm, c.convention) == ("ffd", "per-sequence"))
    # every sequence pays t=32: 32+32+32+64+32 = 192 physical tokens over 2+ slabs
    assert per_seq.s == 32 and per_seq.padding.physical_tokens == 192


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    rng = np.random.default_rng(5)
    lengths = rng.integers(1, 300, 400)
    lengths[7] = 3000
    align = Alignment(tp=2, cp=2, fp8="mxfp8", capacity=1024)
    packing = PackingConfig("mffd", overflow="split", dp=2)
    out, _ = write_pack(str(tmp_path_factory.mktemp("insp")), lengths, align, packing, shard_tokens=50_000)
    return out, lengths, align, packing


def test_packed_output_matches_manifest_and_lengths(packed):
    out, lengths, align, packing = packed
    r = inspect_packed(out)
    st = read_manifest(out)["stats"]
    for k in ("sequences", "slabs", "real_tokens", "loss_tokens", "physical_tokens", "lower_bound", "l2_bound"):
        assert getattr(r, k) == st[k], k
    for k in ("layout_pad", "tail_pad", "fill_pad", "slack"):
        assert getattr(r.padding, k) == st[k], k
    assert r.overflow.chunks == st["overflow"]["chunks"]
    assert re.fullmatch(r"slabs-\d{5}\.parquet row \d+", r.worst_slabs[0].location)
    ref = inspect_lengths(lengths, align, packing)
    assert ref.padding == r.padding and ref.dp == r.dp
    assert ref.length_histogram == r.length_histogram  # chunks reassemble to the source lengths


def test_plan_file_matches_lengths(packed, tmp_path):
    _, lengths, align, packing = packed
    path = str(tmp_path / "plan.parquet")
    write_plan(plan(lengths, align, packing), path)
    r = inspect_plan_file(path, align, packing)
    ref = inspect_lengths(lengths, align, packing)
    assert (r.padding, r.slabs, r.lower_bound, r.l2_bound, r.dp) == (ref.padding, ref.slabs, ref.lower_bound,
                                                                      ref.l2_bound, ref.dp)
    assert r.overflow == ref.overflow
    with pytest.raises(InspectError, match="made with .* tp=1, cp=1, .* pass the same"):
        inspect_plan_file(path, Alignment(tp=1, cp=1, capacity=1024), packing)


def test_plan_file_records_its_settings(packed, tmp_path):
    """Stranger-test R7: the plan Parquet stores alignment and packing in its schema metadata;
    inspect uses them without flags. A file without them (older packtool) needs the flags."""
    import pyarrow.parquet as pq

    from packtool.planning.plan_file import read_plan_config
    _, lengths, align, packing = packed
    path = str(tmp_path / "plan.parquet")
    write_plan(plan(lengths, align, packing), path)
    assert read_plan_config(path) == (align, packing)
    r = inspect_plan_file(path)
    ref = inspect_plan_file(path, align, packing)
    assert (r.padding, r.slabs, r.alignment, r.packing) == (ref.padding, ref.slabs, ref.alignment, ref.packing)
    old = str(tmp_path / "old.parquet")
    pq.write_table(pq.read_table(path).replace_schema_metadata(None), old)
    assert read_plan_config(old) is None
    with pytest.raises(InspectError, match="records no settings .* pass the settings"):
        inspect_plan_file(old)
    assert inspect_plan_file(old, align, packing).padding == ref.padding


def _table_row(text: str, label: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("│ " + label[:20]))


def test_json_html_and_table_carry_the_same_numbers(tmp_path):
    lengths = tmp_path / "lengths.txt"
    lengths.write_text("\n".join(map(str, LENGTHS)))
    page = tmp_path / "r.html"
    flags = ["inspect", "--lengths", str(lengths), "--cp", "2", "--fp8", "tensorwise", "-C", "96", "-a", "ffd"]
    runner = CliRunner()
    res = runner.invoke(app, flags + ["--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["schema"] == "packtool-inspect" and d["schema_version"] == 1
    assert d["path"] == str(lengths)  # the report names the lengths file it read
    # the JSON holds the hand-computed figures
    assert (d["slabs"], d["real_tokens"], d["physical_tokens"], d["capacity_tokens"]) == (2, 99, 128, 192)
    assert [d["padding"][k] for k in ("layout_pad", "tail_pad", "fill_pad", "slack")] == [9, 20, 0, 64]
    assert d["fill_histogram"]["counts"] == [1] + [0] * 8 + [1]
    res = runner.invoke(app, flags + ["--html", str(page)], terminal_width=200)
    assert res.exit_code == 0, res.output
    table = res.output
    page_text = htmlmod.unescape(page.read_text())
    assert "<script" not in page_text and "http" not in page_text.replace("http-equiv", "")  # self-contained
    want = {"real tokens": fmt_int(99), "layout gaps (per sequence, CP)": fmt_int(9),
            "tail pads (per slab, TP/SP/FP8)": fmt_int(20), "unused capacity (slack)": fmt_int(64),
            "physical tokens": fmt_int(128), "efficiency (real / physical)": fmt_pct(99 / 128),
            "waste (padding + slack)": fmt_pct(93 / 192), "slabs": fmt_int(2), "lower bound / L2": "2 / 2"}
    for label, value in want.items():
        assert value in _table_row(table, label), label
        assert f"<td>{label}</td><td>{value}</td>" in page_text, label
    # and every other figure the table shows is on the page, in the same words
    from packtool.inspection.planned import inspect_lengths as il
    for label, value, share in inspect_figures(il(LENGTHS, ALIGN, FFD)):
        assert f"<td>{label}</td><td>{value}</td><td>{share}</td>" in page_text
    # histograms: the same counts in the table, the page's table and its SVG bars
    assert "<svg" in page_text and "90%–100%</td><td>1</td>" in page_text
    assert re.search(r"90%–100% *│ *1 │", table)
    assert "what if: --max-tokens 64" in table and "what if: --max-tokens 64" in page_text


def test_cli_packed_and_errors(packed, tmp_path):
    out = packed[0]
    runner = CliRunner()
    res = runner.invoke(app, ["inspect", out, "--json", "--no-what-if"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["kind"] == "packed" and d["loss_tokens"] == read_manifest(out)["stats"]["loss_tokens"]
    res = runner.invoke(app, ["inspect"])
    assert res.exit_code == 2 and "exactly one" in res.output
    res = runner.invoke(app, ["inspect", str(tmp_path / "missing")])
    assert res.exit_code == 2 and "no such folder" in res.output  # a typo, not an interrupted pack


def test_docs_list_every_json_key():
    """docs/INSPECT.md documents the --json schema: every key the report emits is named there."""
    doc = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "INSPECT.md")).read()
    d = inspect_lengths(LENGTHS, ALIGN, FFD, compare=True).to_dict()

    def keys(x, acc):
        if isinstance(x, dict):
            for k, v in x.items():
                acc.add(k)
                keys(v, acc)
        elif isinstance(x, list):
            for v in x:
                keys(v, acc)
        return acc
    missing = sorted(k for k in keys(d, set()) if f"`{k}`" not in doc)
    assert not missing, missing


def test_packed_fixed_length_counts_fill(tmp_path):
    align = Alignment(tp=2, cp=1, capacity=300, fixed_length=300)
    out, _ = write_pack(str(tmp_path), np.arange(20, 160, 9), align, PackingConfig("bfd"))
    r = inspect_packed(out, what_if=False)
    st = read_manifest(out)["stats"]
    assert r.padding.fill_pad == st["fill_pad"] > 0
    assert r.physical_tokens == 300 * r.slabs and r.padding.slack == 0


def test_cli_plan_file_round_trip(tmp_path):
    lengths = tmp_path / "lengths.txt"
    lengths.write_text("\n".join(map(str, LENGTHS * 20)))
    flags = ["--cp", "2", "--fp8", "tensorwise", "-C", "96", "-a", "ffd"]
    runner = CliRunner()
    res = runner.invoke(app, ["plan", "--lengths", str(lengths), "-o", str(tmp_path / "p.parquet"), "--json"] + flags)
    assert res.exit_code == 0, res.output
    planned = json.loads(res.output)
    res = runner.invoke(app, ["inspect", "--plan", str(tmp_path / "p.parquet"), "--json"] + flags)
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)  # stderr holds the plan file's settings note
    assert d["kind"] == "plan" and d["slabs"] == planned["slabs"]
    assert d["padding"] == planned["padding"]
    res = runner.invoke(app, ["inspect", "--plan", str(tmp_path / "p.parquet"), "-C", "96"])
    assert res.exit_code == 0, res.output  # as recorded: the flags not typed are the file's (S36-7)
    res = runner.invoke(app, ["inspect", "--plan", str(tmp_path / "p.parquet"), "-C", "96", "--cp", "1"])
    assert res.exit_code == 2 and "but --cp 1 was passed" in res.output and "pass the same" in res.output
    res = runner.invoke(app, ["inspect", "--plan", str(tmp_path / "p.parquet")])  # the file's own flags
    assert res.exit_code == 0, res.output
    assert "settings recorded in the plan file: -C 96 --tp 1 --cp 2" in res.stderr and "-a ffd" in res.stderr
