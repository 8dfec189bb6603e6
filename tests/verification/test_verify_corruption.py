"""The corruption corpus: each way a packed output can break is caught, by a message that
names what broke. The clean output verifies. Shards are edited and re-signed where the
case is about content, so that the checksum cannot be what catches it."""
from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
from slab_support import edit_checksum, find_row, load_rows, read_manifest, resign, save_manifest, save_rows

from packtool.align import Alignment
from packtool.packing import pack
from packtool.planning.core import PackingConfig
from packtool.slabs.names import MANIFEST
from packtool.tokenize.config import TokenizeConfig
from packtool.verification.run import source_store, verify

# tp=1 cp=2: s=4, t=4; C=256, so the longer GSM8K rows are split
ALIGN = Alignment(tp=1, cp=2, capacity=256)
PACKING = PackingConfig("bfd", overflow="split")
ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures")
INPUTS = [os.path.join(ROOT, "data", "gsm8k_train_200.jsonl")]
TOKENIZE = TokenizeConfig(tokenizer=os.path.join(ROOT, "tokenizers", "mistral-7b-v0.1"),
                          prompt_field="question", response_field="answer")


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """A real `pack` of real data (GSM8K, Mistral tokenizer), cut into several shards."""
    root = tmp_path_factory.mktemp("clean")
    cache = str(root / "cache")
    out = str(root / "packed")
    res = pack(INPUTS, ALIGN, PACKING, TOKENIZE, output=out, cache_dir=cache, shard_tokens=4096)
    assert res.plan.overflow.sequences > 0  # the corpus needs split rows
    src, _ = source_store(INPUTS, TOKENIZE, cache_dir=cache)
    return out, src


@pytest.fixture
def packed(clean, tmp_path):
    out, src = clean
    dst = str(tmp_path / "packed")
    shutil.copytree(out, dst)
    return dst, src


def checks(report) -> set:
    return set(report.counts)


def messages(report, check) -> str:
    return "\n".join(p.message for p in report.problems if p.check == check)


def same_length_pair(a, b):
    """Two whole (unsplit) sequences of equal length, in different rows, one from each table."""
    whole = lambda t, r, k, n: t["source_index"][r][k] >= 0 and t["chunk_index"][r][k] == 0 and n < ALIGN.usable  # noqa: E731
    seen = {}
    for r, lens in enumerate(a["seq_lens"]):
        for k, n in enumerate(lens.tolist()):
            if whole(a, r, k, n):
                seen.setdefault(n, (r, k))
    for r, lens in enumerate(b["seq_lens"]):
        for k, n in enumerate(lens.tolist()):
            if n in seen and seen[n][0] != r and whole(b, r, k, n):
                return seen[n], (r, k)
    raise AssertionError("no equal-length pair; enlarge the fixture")


def test_clean_pack_verifies(packed):
    out, src = packed
    r = verify(out, workers=1)
    assert r.ok, r.problems
    assert len(read_manifest(out)["shards"]) >= 3  # the corpus needs several shards
    r = verify(out, src, workers=1)
    assert r.ok and r.source_checked, r.problems
    m = read_manifest(out)["stats"]
    assert (r.slabs, r.real_tokens, r.loss_tokens) == (m["slabs"], m["real_tokens"], m["loss_tokens"])


def test_clean_pack_verifies_in_a_process_pool(packed):
    out, src = packed
    r = verify(out, src, workers=2)
    assert r.ok, r.problems


def test_truncated_shard(packed):
    out, _ = packed
    path = os.path.join(out, "slabs-00001.parquet")
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2])
    r = verify(out, workers=1)
    assert not r.ok
    assert {"shard_size", "checksum", "shard_unreadable"} <= checks(r)
    assert "truncated" in messages(r, "shard_size") and "slabs-00001.parquet" in messages(r, "shard_size")


def test_flipped_bytes(packed):
    out, _ = packed
    path = os.path.join(out, "slabs-00000.parquet")
    data = bytearray(open(path, "rb").read())
    for i in range(len(data) // 2, len(data) // 2 + 4):
        data[i] ^= 0xFF
    open(path, "wb").write(bytes(data))
    r = verify(out, workers=1)
    assert "checksum" in checks(r)
    assert "flipped" in messages(r, "checksum") and "slabs-00000.parquet" in messages(r, "checksum")


def test_manifest_of_an_older_version_with_sha256_checksums(packed):
    """Outputs written before xxh3-128 carry sha256 per shard: they verify, and a flipped
    byte is still caught and named with that algorithm."""
    import hashlib
    out, _ = packed
    man = read_manifest(out)
    assert all("xxh3_128" in s and "sha256" not in s for s in man["shards"])
    for s in man["shards"]:
        del s["xxh3_128"]
        s["sha256"] = hashlib.sha256(open(os.path.join(out, s["file"]), "rb").read()).hexdigest()
    save_manifest(out, man)
    assert verify(out, workers=1).ok
    path = os.path.join(out, "slabs-00001.parquet")
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(path, "wb").write(bytes(data))
    r = verify(out, workers=1)
    assert "checksum" in checks(r) and "sha256" in messages(r, "checksum")


@pytest.mark.parametrize("alg", ["xxh3_128", "sha256"])
def test_checksum_message_shows_hashes_that_differ(packed, alg):
    """Stranger trial S30-12: both digests were cut to 16 digits, so a manifest entry changed in
    its last digit read as `is 72dc512ecfe04371…, the manifest says 72dc512ecfe04371…`."""
    out, _ = packed
    edited = edit_checksum(out, 1, alg)
    r = verify(out, workers=1)
    found, said = messages(r, "checksum").split(" is ", 1)[1].split(", the manifest says ")
    said = said.split(":")[0]
    assert found != said and said == edited, messages(r, "checksum")


def test_missing_shard(packed):
    out, _ = packed
    os.remove(os.path.join(out, "slabs-00002.parquet"))
    r = verify(out, workers=1)
    assert checks(r) == {"shard_missing"}
    assert "slabs-00002.parquet" in messages(r, "shard_missing")


def test_extra_shard(packed):
    out, _ = packed
    shutil.copy(os.path.join(out, "slabs-00000.parquet"), os.path.join(out, "slabs-00099.parquet"))
    r = verify(out, workers=1)
    assert checks(r) == {"shard_extra"}
    assert "slabs-00099.parquet" in messages(r, "shard_extra")


def test_dropped_row(packed):
    out, _ = packed
    cols = load_rows(out, "slabs-00000.parquet")
    # a row of whole sequences only (a split row's first chunk is U=256 long)
    r0 = find_row(cols, lambda row: (row["seq_lens"] < ALIGN.usable).all() and (row["chunk_index"] <= 0).all())
    lost = set(int(x) for x in cols["source_index"][r0] if x >= 0)
    cols = {k: v[:r0] + v[r0 + 1:] for k, v in cols.items()}
    save_rows(out, "slabs-00000.parquet", cols)
    r = verify(out, workers=1)
    assert {"missing_sequence", "slab_index", "manifest_stats"} <= checks(r)
    text = messages(r, "missing_sequence")
    assert "appear in no slab" in text and all(str(x) in text for x in lost)


def test_duplicated_segment(packed):
    out, _ = packed
    a = load_rows(out, "slabs-00000.parquet")
    b = load_rows(out, "slabs-00001.parquet")
    # copy a segment of shard 0 over a same-length segment of shard 1 (tokens and identity)
    (ra, sa), (rb, sb) = same_length_pair(a, b)
    n = int(a["seq_lens"][ra][sa])
    pa_, pb = int(a["cu_seqlens_padded"][ra][sa]), int(b["cu_seqlens_padded"][rb][sb])
    b["input_ids"][rb][pb:pb + n] = a["input_ids"][ra][pa_:pa_ + n]
    b["loss_mask"][rb][pb:pb + n] = a["loss_mask"][ra][pa_:pa_ + n]
    for col in ("source_index", "chunk_index", "source_offset"):
        b[col][rb][sb] = a[col][ra][sa]
    b["num_loss_tokens"][rb] = int(b["loss_mask"][rb].sum())
    save_rows(out, "slabs-00001.parquet", b)
    r = verify(out, workers=1)
    assert "duplicate_segment" in checks(r) and "missing_sequence" in checks(r)
    src = int(a["source_index"][ra][sa])
    assert f"source row {src} chunk" in messages(r, "duplicate_segment")
    assert "appears twice" in messages(r, "duplicate_segment")


def test_swapped_segments_across_slabs_caught_by_source(packed):
    out, src = packed
    a = load_rows(out, "slabs-00000.parquet")
    (r0, s0), (rb, sb) = same_length_pair(a, a)
    n = int(a["seq_lens"][r0][s0])
    p0, pb = int(a["cu_seqlens_padded"][r0][s0]), int(a["cu_seqlens_padded"][rb][sb])
    x = a["input_ids"][r0][p0:p0 + n].copy()
    a["input_ids"][r0][p0:p0 + n] = a["input_ids"][rb][pb:pb + n]
    a["input_ids"][rb][pb:pb + n] = x
    save_rows(out, "slabs-00000.parquet", a)
    assert verify(out, workers=1).ok  # same lengths: only the source can tell
    r = verify(out, src, workers=1)
    assert checks(r) == {"source_tokens"}
    assert "tokens differ from the source" in messages(r, "source_tokens")


def test_swapped_segments_inside_a_slab(packed):
    out, src = packed
    a = load_rows(out, "slabs-00000.parquet")
    r0 = find_row(a, lambda row: len(row["seq_lens"]) >= 2 and row["seq_lens"][0] != row["seq_lens"][1])
    cup = a["cu_seqlens_padded"][r0]
    ids, loss = a["input_ids"][r0], a["loss_mask"][r0]
    n0, n1 = int(a["seq_lens"][r0][0]), int(a["seq_lens"][r0][1])
    seg0 = (ids[: n0].copy(), loss[: n0].copy())
    seg1 = (ids[cup[1]: cup[1] + n1].copy(), loss[cup[1]: cup[1] + n1].copy())
    # the two segments' tokens trade places; seq_lens and cu arrays are left alone
    ids[: cup[2]], loss[: cup[2]] = 0, 0
    ids[: n1], loss[: n1] = seg1
    ids[n1: n1 + n0], loss[n1: n1 + n0] = seg0
    save_rows(out, "slabs-00000.parquet", a)
    r = verify(out, src, workers=1)
    assert not r.ok
    assert checks(r) & {"loss_on_pad", "pad_token", "source_tokens", "loss_on_first_token"}
    assert "source_tokens" in checks(r)


def test_wrong_cu_seqlens(packed):
    out, _ = packed
    a = load_rows(out, "slabs-00001.parquet")
    r0 = find_row(a, lambda row: len(row["seq_lens"]) >= 2)
    a["cu_seqlens"][r0][1] += 1
    save_rows(out, "slabs-00001.parquet", a)
    r = verify(out, workers=1)
    assert checks(r) == {"cu_seqlens"}
    p = next(p for p in r.problems if p.check == "cu_seqlens")
    assert (p.shard, p.row) == ("slabs-00001.parquet", r0)
    assert "seq_lens says" in p.message


def test_wrong_cu_seqlens_padded_breaks_alignment(packed):
    out, _ = packed
    a = load_rows(out, "slabs-00001.parquet")
    r0 = find_row(a, lambda row: len(row["seq_lens"]) >= 2 and row["cu_seqlens_padded"][1] - row["seq_lens"][0] >= 2)
    a["cu_seqlens_padded"][r0][1] -= 2
    a["cp_offsets"][r0][1] = a["cu_seqlens_padded"][r0][1] // ALIGN.cp
    save_rows(out, "slabs-00001.parquet", a)
    r = verify(out, workers=1)
    assert {"segment_alignment", "layout"} <= checks(r)
    assert "not a multiple of the per-sequence multiple s=4" in messages(r, "segment_alignment")


def test_loss_on_a_pad(packed):
    out, _ = packed
    a = load_rows(out, "slabs-00002.parquet")
    r0 = find_row(a, lambda row: row["cu_seqlens_padded"][1] > row["seq_lens"][0])
    pos = int(a["seq_lens"][r0][0])  # first pad after segment 0
    a["loss_mask"][r0][pos] = 1
    a["num_loss_tokens"][r0] += 1
    save_rows(out, "slabs-00002.parquet", a)
    r = verify(out, workers=1)
    assert "loss_on_pad" in checks(r)
    p = next(p for p in r.problems if p.check == "loss_on_pad")
    assert (p.row, p.segment) == (r0, 0) and f"pad position {pos}" in p.message


def test_loss_on_a_first_token(packed):
    out, _ = packed
    a = load_rows(out, "slabs-00002.parquet")
    a["loss_mask"][0][0] = 1
    a["num_loss_tokens"][0] += 1
    save_rows(out, "slabs-00002.parquet", a)
    r = verify(out, workers=1)
    assert "loss_on_first_token" in checks(r)


def _edit_alignment(out, **kw):
    man = read_manifest(out)
    a = {**man["config"]["alignment"], **kw}
    new = Alignment(tp=a["tp"], cp=a["cp"], sp=a["sp"], fp8=a["fp8"], capacity=a["capacity"],
                    fixed_length=a["fixed_length"], convention=a["convention"])
    a.update(s=new.s, t=new.t, usable=new.usable)  # a consistent edit: only the slabs disagree
    man["config"]["alignment"] = a
    save_manifest(out, man)
    return new


def test_misaligned_footprint_for_the_manifest_tp(packed):
    out, _ = packed
    new = _edit_alignment(out, tp=4, sp=True)  # SP over 4 ranks: t = lcm(4, cp*tp) = 8
    assert new.t == 8
    r = verify(out, workers=1)
    assert "slab_alignment" in checks(r)
    assert "t=8" in messages(r, "slab_alignment") and "tp=4" in messages(r, "slab_alignment")


def test_misaligned_footprint_for_the_manifest_fp8(packed):
    out, _ = packed
    new = _edit_alignment(out, fp8="mxfp8")
    assert new.t == 64
    r = verify(out, workers=1)
    assert "slab_alignment" in checks(r)
    assert "not a multiple of the per-slab multiple t=64" in messages(r, "slab_alignment")
    assert "fp8=mxfp8" in messages(r, "slab_alignment")


def test_misaligned_segments_for_the_manifest_cp(packed):
    out, _ = packed
    new = _edit_alignment(out, cp=4)  # s=8: segments padded to 4 no longer divide
    r = verify(out, workers=1)
    assert "segment_alignment" in checks(r)
    assert f"s={new.s}" in messages(r, "segment_alignment")


def test_capacity_exceeded(packed):
    out, _ = packed
    _edit_alignment(out, capacity=128)
    r = verify(out, workers=1)
    assert "capacity" in checks(r)
    assert "exceeds the usable capacity U=128" in messages(r, "capacity")


def test_edited_manifest_stats(packed):
    out, _ = packed
    man = read_manifest(out)
    man["stats"]["real_tokens"] += 5
    man["stats"]["overflow"]["chunks"] += 1
    save_manifest(out, man)
    r = verify(out, workers=1)
    # stats.changes.chunks repeats stats.overflow.chunks: the edit leaves them disagreeing too
    assert checks(r) == {"manifest_stats", "manifest_declared"}
    text = messages(r, "manifest_stats")
    assert "stats.real_tokens" in text and "stats.overflow.chunks" in text
    assert "stats.changes.chunks" in messages(r, "manifest_declared")


def test_edited_manifest_alignment(packed):
    out, _ = packed
    man = read_manifest(out)
    man["config"]["alignment"]["t"] = 8
    save_manifest(out, man)
    r = verify(out, workers=1)
    assert "manifest" in checks(r) and "config.alignment.t" in messages(r, "manifest")


def test_edited_shard_rows_in_manifest(packed):
    out, _ = packed
    man = read_manifest(out)
    man["shards"][0]["rows"] += 1
    save_manifest(out, man)
    r = verify(out, workers=1)
    assert checks(r) == {"shard_counts"}


def test_tokens_that_differ_from_the_source(packed):
    out, src = packed
    a = load_rows(out, "slabs-00001.parquet")
    a["input_ids"][0][1] = (int(a["input_ids"][0][1]) + 1) % 31000 + 3
    save_rows(out, "slabs-00001.parquet", a)
    assert verify(out, workers=1).ok  # a plausible token: structure alone cannot tell
    r = verify(out, src, workers=1)
    assert checks(r) == {"source_tokens"}
    p = r.problems[0]
    assert (p.shard, p.row, p.segment) == ("slabs-00001.parquet", 0, 0)
    assert f"position 1 holds {int(a['input_ids'][0][1])}" in p.message


def test_wrong_pad_token(packed):
    out, _ = packed
    a = load_rows(out, "slabs-00000.parquet")
    r0 = find_row(a, lambda row: row["cu_seqlens_padded"][1] > row["seq_lens"][0])
    a["input_ids"][r0][int(a["seq_lens"][r0][0])] = 7
    save_rows(out, "slabs-00000.parquet", a)
    r = verify(out, workers=1)
    assert checks(r) == {"pad_token"}


def test_split_chunk_out_of_order(packed):
    out, _ = packed
    for shard in sorted(f for f in os.listdir(out) if f.endswith(".parquet")):
        a = load_rows(out, shard)
        hit = [(r, k) for r in range(len(a["chunk_index"])) for k, c in enumerate(a["chunk_index"][r]) if c == 1]
        if hit:
            r0, k = hit[0]
            a["source_offset"][r0][k] += 4
            save_rows(out, shard, a)
            break
    r = verify(out, workers=1)
    assert "chunk_order" in checks(r)


def test_missing_manifest(packed):
    out, _ = packed
    os.remove(os.path.join(out, MANIFEST))
    r = verify(out, workers=1)
    assert checks(r) == {"manifest"} and MANIFEST in messages(r, "manifest")


def test_cp_offsets(packed):
    out, _ = packed
    a = load_rows(out, "slabs-00000.parquet")
    a["cp_offsets"][0][1] += 1
    save_rows(out, "slabs-00000.parquet", a)
    r = verify(out, workers=1)
    assert checks(r) == {"cp_offsets"}


def test_resign_is_what_hides_content_edits_from_checksum(packed):
    # guard for the corpus itself: without re-signing, the checksum catches every edit
    out, _ = packed
    a = load_rows(out, "slabs-00000.parquet")
    save_rows(out, "slabs-00000.parquet", a, sign=False)
    r = verify(out, workers=1)
    assert "checksum" in checks(r)
    resign(out, "slabs-00000.parquet")
    assert verify(out, workers=1).ok


def test_loss_mask_that_differs_from_the_source(packed):
    out, src = packed
    a = load_rows(out, "slabs-00001.parquet")
    r0 = find_row(a, lambda row: row["loss_mask"][1:int(row["seq_lens"][0])].any())
    k = 1 + int(np.flatnonzero(a["loss_mask"][r0][1:int(a["seq_lens"][r0][0])])[0])
    a["loss_mask"][r0][k] = 0  # a target dropped: still a valid mask on its own
    a["num_loss_tokens"][r0] -= 1
    save_rows(out, "slabs-00001.parquet", a)
    man = read_manifest(out)
    man["stats"]["loss_tokens"] -= 1
    for s in man["shards"]:
        if s["file"] == "slabs-00001.parquet":
            s["loss_tokens"] -= 1
    save_manifest(out, man)
    assert verify(out, workers=1).ok
    r = verify(out, src, workers=1)
    assert set(r.counts) == {"source_loss_mask"}
    assert f"position {k} is 0, expected 1" in r.problems[0].message


def test_cli_with_source(packed, tmp_path):
    from typer.testing import CliRunner

    from packtool.cli.app import app
    out, _ = packed
    # a cache root of the user's: verify --source re-tokenizes into a fresh temporary under it
    # whatever it holds. Not the folder above `src`: that is the fixture's source_store temporary,
    # which packtool removes at exit and so refuses as a --cache-dir (output.relations)
    cache = str(tmp_path / "cache")
    args = ["verify", out, "--source", INPUTS[0], "--prompt-field", "question", "--response-field", "answer",
            "--cache-dir", cache, "--workers", "1", "--json"]
    res = CliRunner().invoke(app, args)  # tokenizer and template default to the manifest's
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["source_checked"]
    a = load_rows(out, "slabs-00000.parquet")
    a["input_ids"][0][2] = (int(a["input_ids"][0][2]) + 7) % 31000 + 3
    save_rows(out, "slabs-00000.parquet", a)
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 1
    d = json.loads(res.output)
    assert d["counts"] == {"source_tokens": 1} and d["problems"][0]["row"] == 0


def test_manifest_that_lists_no_shards(packed):
    out, _ = packed
    man = read_manifest(out)
    man["shards"] = []
    save_manifest(out, man)
    r = verify(out, workers=1)
    assert {"manifest", "shard_extra"} <= checks(r) and "lists no shards" in messages(r, "manifest")
