"""`pack --engine ray` on a local Ray (2 CPUs): the same bytes as the local engine, a worker
killed mid-write still gives a complete verifying output, a failed run leaves nothing."""
from __future__ import annotations

import filecmp
import json
import os

import pytest

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'packtool[ray]')")

from conftest import GPT2, GSM8K, LOCAL_RAY_GROUP, MISTRAL_DIR, PEPS, TASKMASTER  # noqa: E402
from ray_faults import killed_once  # noqa: E402

from packtool.align import Alignment  # noqa: E402
from packtool.engines.ray_engine import pack_ray  # noqa: E402
from packtool.errors import PacktoolError, PacktoolInputError  # noqa: E402
from packtool.packing import pack  # noqa: E402
from packtool.planning.core import PackingConfig  # noqa: E402
from packtool.tokenize.config import TokenizeConfig  # noqa: E402
from packtool.verification.run import verify  # noqa: E402

MIXED = [GSM8K, TASKMASTER, PEPS]  # fields, chat and long text (split) in one run
MIXED_CFG = TokenizeConfig(tokenizer=MISTRAL_DIR, chat_template="mistral",
                           prompt_field="question", response_field="answer")
ALIGN = Alignment(tp=2, cp=2, fp8="blockwise", capacity=2048)
SHARD = 100_000  # tokens per shard: several shards, so several write tasks


pytestmark = [pytest.mark.usefixtures("local_ray"), LOCAL_RAY_GROUP]  # one Ray with tests/conftest.py's other users


def _same_files(a: str, b: str) -> None:
    names = sorted(os.listdir(a))
    assert names == sorted(os.listdir(b))
    assert len([n for n in names if n.endswith(".parquet")]) >= 2
    diff = [n for n in names if not filecmp.cmp(os.path.join(a, n), os.path.join(b, n), shallow=False)]
    assert not diff, f"differ: {diff}"


def test_ray_writes_the_local_bytes_and_a_killed_writer_is_retried(tmp_path, monkeypatch):
    pk = PackingConfig("mffd", overflow="split", dp=2, seed=3)
    local = pack(MIXED, ALIGN, pk, MIXED_CFG, output=str(tmp_path / "local"),
                 cache_dir=str(tmp_path / "c_local"), shard_tokens=SHARD)
    kills = tmp_path / "kills"
    kills.mkdir()
    killed_once(monkeypatch, kills)  # first attempt of every shard write dies
    res = pack_ray(MIXED, ALIGN, pk, MIXED_CFG, output=str(tmp_path / "ray"),
                   cache_dir=str(tmp_path / "c_ray"), shard_tokens=SHARD)
    n_shards = len(res.shards)
    assert sorted(os.listdir(kills)) == [f"shard-{k:05d}.killed" for k in range(n_shards)]
    _same_files(str(tmp_path / "local"), str(tmp_path / "ray"))
    assert res.loss_tokens == local.loss_tokens and res.plan.num_slabs == local.plan.num_slabs
    assert verify(str(tmp_path / "ray")).ok
    # same fingerprint both ways: the local engine reuses the Ray-built cache and vice versa
    assert os.path.basename(os.path.dirname(res.cache_path)) == \
        os.path.basename(os.path.dirname(local.cache_path))
    monkeypatch.undo()
    # one plan shard: the sharded path (placements in the object store, sub-plans rebuilt by
    # the write tasks) gives the same bytes as the global plan
    one = pack_ray(MIXED, ALIGN, pk, MIXED_CFG, output=str(tmp_path / "ray1"),
                   cache_dir=str(tmp_path / "c_ray"), shard_tokens=SHARD, plan_shard_rows=10**9)
    assert one.plan.stats.shards == 1
    _same_files(str(tmp_path / "local"), str(tmp_path / "ray1"))
    again = pack(MIXED, ALIGN, pk, MIXED_CFG, output=str(tmp_path / "local2"),
                 cache_dir=str(tmp_path / "c_ray"), shard_tokens=SHARD)
    assert again.cache_path == res.cache_path
    _same_files(str(tmp_path / "local"), str(tmp_path / "local2"))


def _with_empty_rows(tmp_path) -> str:
    rows = [{"text": "first document, some words"}, {"text": "  "},
            {"text": "third one is here"}, {"text": ""}, {"text": "and the last"}]
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows * 40))
    return str(path)


def test_skipped_rows_match_and_errors_name_the_row(tmp_path):
    src = _with_empty_rows(tmp_path)
    cfg = TokenizeConfig(tokenizer=GPT2, on_empty="skip", prompt_field="question", response_field="answer")
    al = Alignment(capacity=512)
    pack([src, GSM8K], al, PackingConfig(seed=1), cfg, output=str(tmp_path / "l"),
         cache_dir=str(tmp_path / "c1"), shard_tokens=4096)
    res = pack_ray([src, GSM8K], al, PackingConfig(seed=1), cfg, output=str(tmp_path / "r"),
                   cache_dir=str(tmp_path / "c2"), shard_tokens=4096)
    _same_files(str(tmp_path / "l"), str(tmp_path / "r"))
    meta = json.load(open(os.path.join(os.path.dirname(res.cache_path), "cache.json")))
    assert meta["skipped"]["empty"] == 80 and meta["skipped"]["rows"][:2] == [1, 3]
    with pytest.raises(PacktoolInputError, match=r"docs.jsonl, row 1: empty example"):
        pack_ray([src], al, None, TokenizeConfig(tokenizer=GPT2), output=str(tmp_path / "x"),
                 cache_dir=str(tmp_path / "c3"))
    assert not os.path.exists(tmp_path / "x")
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"text": "fine"}\n{"text": oops}\n')
    with pytest.raises(PacktoolInputError, match=r"broken.jsonl: invalid JSON at line 2"):
        pack_ray([str(broken)], al, None, TokenizeConfig(tokenizer=GPT2), output=str(tmp_path / "y"),
                 cache_dir=str(tmp_path / "c3"))
    # the failed runs remove the --cache-dir they made (and nothing else)
    assert not os.path.exists(tmp_path / "y") and not os.path.exists(tmp_path / "c3")


def test_a_failed_write_leaves_no_output(tmp_path, monkeypatch):
    killed_once(monkeypatch, tmp_path / "missing" / "dir")  # marker cannot be made: every attempt fails
    out = tmp_path / "out"
    with pytest.raises(Exception, match="missing"):
        pack_ray([GSM8K], Alignment(capacity=1024), None,
                 TokenizeConfig(tokenizer=GPT2, prompt_field="question", response_field="answer"),
                 output=str(out), cache_dir=str(tmp_path / "c"))
    assert not out.exists()
    assert not [p for p in os.listdir(tmp_path) if "packtool-tmp" in p]


def test_sharded_plan_on_ray_verifies(tmp_path):
    """Sharded planning: the driver gets per-bin arrays only; the output verifies, every row
    appears once, and the slabs are those of the library's sharded plan, materialized."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from packtool.planning.sharded import ShardedPlan, plan_sharded
    from packtool.tokenize.cache import TokenizedCache
    pk = PackingConfig("bfd", overflow="split", dp=2, seed=4)
    res = pack_ray(MIXED, ALIGN, pk, MIXED_CFG, output=str(tmp_path / "o"),
                   cache_dir=str(tmp_path / "c"), plan_shard_rows=150, shard_tokens=SHARD)
    p = res.plan
    assert isinstance(p, ShardedPlan) and p.stats.shards >= 3 and p.stats.merged_items > 0
    assert p.stats.extra_bins == p.stats.kept_bins + p.stats.merged_bins - p.lower_bound >= 0
    assert verify(str(tmp_path / "o")).ok
    assert len(res.shards) >= 2
    t = pa.concat_tables([pq.read_table(str(tmp_path / "o" / s.file)) for s in res.shards])
    src = t.column("source_index").combine_chunks()
    chunk = np.asarray(t.column("chunk_index").combine_chunks().values)
    rows = np.asarray(src.values)
    lengths = TokenizedCache(os.path.dirname(res.cache_path)).lengths()
    assert np.array_equal(np.unique(rows[chunk == 0]), np.arange(lengths.size))  # each row once
    assert np.unique(rows * 1000 + chunk).size == rows.size
    m = plan_sharded(lengths, ALIGN, pk, shard_rows=150).materialize()
    assert np.array_equal(rows, m.segments.source) and np.array_equal(chunk, m.segments.chunk)
    assert np.array_equal(np.asarray(t.column("slab_index")), m.slab_index)
    assert np.array_equal(np.asarray(t.column("dp_rank")), m.dp_rank)
    # the local engine's spilled plan of the same shards writes the same bytes
    pack(MIXED, ALIGN, pk, MIXED_CFG, output=str(tmp_path / "local"), cache_dir=str(tmp_path / "c"),
         plan_shard_rows=150, shard_tokens=SHARD)
    _same_files(str(tmp_path / "o"), str(tmp_path / "local"))


def test_cli_engine_ray(tmp_path):
    from typer.testing import CliRunner

    from packtool.cli.app import app
    out = tmp_path / "o"
    r = CliRunner().invoke(app, ["pack", GSM8K, "--tokenizer", GPT2, "--prompt-field", "question",
                                 "--response-field", "answer", "-C", "1024", "-o", str(out),
                                 "--cache-dir", str(tmp_path / "c"), "--engine", "ray", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output.strip().splitlines()[-1])["shards"] == 1
    assert verify(str(out)).ok
    r = CliRunner().invoke(app, ["pack", GSM8K, "--tokenizer", GPT2, "--prompt-field", "question",
                                 "--response-field", "answer", "-C", "1024", "-o", str(tmp_path / "s"),
                                 "--cache-dir", str(tmp_path / "c"), "--engine", "ray",
                                 "--plan-shard-rows", "40"])
    assert r.exit_code == 0, r.output
    assert "Sharded plan: " in r.output and "bins over the lower bound" in r.output
    assert verify(str(tmp_path / "s")).ok
    r = CliRunner().invoke(app, ["pack", GSM8K, "--tokenizer", GPT2, "--prompt-field", "question",
                                 "--response-field", "answer", "-C", "1024", "-o", str(tmp_path / "s"),
                                 "--cache-dir", str(tmp_path / "c"), "--engine", "ray", "--overwrite",
                                 "--plan-shard-rows", "40", "--json"])
    d = json.loads(r.output.strip().splitlines()[-1])
    assert d["sharded_plan"]["shards"] > 1 and d["sharded_plan"]["extra_bins"] == d["slabs"] - d["lower_bound"]
    bad = CliRunner().invoke(app, ["pack", GSM8K, "--tokenizer", GPT2, "-o", str(tmp_path / "p"),
                                   "--engine", "spark"])
    assert bad.exit_code == 2 and "--engine must be one of local, ray" in bad.output
    bad = CliRunner().invoke(app, ["pack", GSM8K, "--tokenizer", GPT2, "-o", str(tmp_path / "p"),
                                   "--plan-shard-rows", "-1"])
    assert bad.exit_code == 2 and "--plan-shard-rows must be a nonnegative integer" in bad.output


def test_json_arrays_and_parquet_pieces_match_local(tmp_path, monkeypatch):
    """ShareGPT and Alpaca JSON arrays, and pre-tokenized Parquet read as several row-group
    pieces (one read task each) in one run: the local bytes."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from conftest import ALPACA, SHAREGPT

    from packtool.engines import ray_source
    from packtool.tokenize.readers import resolve_inputs
    rng = np.random.default_rng(0)
    lens = rng.integers(3, 700, 300)
    ids = [rng.integers(5, 50000, n).astype(np.int32) for n in lens]
    labels = [np.where(np.arange(n) < n // 2, -100, x) for n, x in zip(lens, ids)]
    tok = str(tmp_path / "tok.parquet")
    pq.write_table(pa.table({"input_ids": ids, "labels": labels}), tok, row_group_size=40)
    monkeypatch.setattr(ray_source, "PARQUET_ROWS_PER_TASK", 100)  # 300 rows -> 3 pieces
    assert len([p for p in ray_source.plan_pieces(resolve_inputs([tok]))]) == 3
    inputs = [SHAREGPT, tok, ALPACA]
    cfg = TokenizeConfig(tokenizer=GPT2, chat_template="chatml")
    pk = PackingConfig("bfd", overflow="split", seed=5)
    al = Alignment(tp=2, capacity=1024)
    pack(inputs, al, pk, cfg, output=str(tmp_path / "l"), cache_dir=str(tmp_path / "c1"),
         shard_tokens=50_000)
    pack_ray(inputs, al, pk, cfg, output=str(tmp_path / "r"), cache_dir=str(tmp_path / "c2"),
             shard_tokens=50_000)
    _same_files(str(tmp_path / "l"), str(tmp_path / "r"))


def test_pretokenized_cache_is_shared_both_ways(tmp_path):
    """A cache of pre-tokenized inputs built locally keeps its token lists in flat/ only; Ray
    reuses it (its write tasks read the tokens there) and writes the local bytes. A Ray-built
    cache of the same inputs (Parquet token lists) is reused by the local engine just as well."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    rng = np.random.default_rng(2)
    ids = [rng.integers(5, 50000, n).astype(np.int32) for n in rng.integers(3, 700, 300)]
    tok = str(tmp_path / "tok.parquet")
    pq.write_table(pa.table({"input_ids": ids}), tok, row_group_size=40)
    cfg, pk, al = TokenizeConfig(shape="tokens"), PackingConfig("bfd", overflow="split"), Alignment(capacity=1024)
    local = pack([tok], al, pk, cfg, output=str(tmp_path / "l"), cache_dir=str(tmp_path / "c1"),
                 shard_tokens=50_000)
    with open(os.path.join(os.path.dirname(local.cache_path), "cache.json")) as f:
        assert json.load(f)["token_lists"] == "flat"
    reused = pack_ray([tok], al, pk, cfg, output=str(tmp_path / "r"), cache_dir=str(tmp_path / "c1"),
                      shard_tokens=50_000)
    assert reused.cache_path == local.cache_path
    _same_files(str(tmp_path / "l"), str(tmp_path / "r"))
    pack_ray([tok], al, pk, cfg, output=str(tmp_path / "r2"), cache_dir=str(tmp_path / "c2"), shard_tokens=50_000)
    again = pack([tok], al, pk, cfg, output=str(tmp_path / "l2"), cache_dir=str(tmp_path / "c2"),
                 shard_tokens=50_000)
    _same_files(str(tmp_path / "l"), str(tmp_path / "r2"))
    _same_files(str(tmp_path / "l"), str(tmp_path / "l2"))
    assert os.path.dirname(again.cache_path).startswith(str(tmp_path / "c2"))


@pytest.mark.parametrize("shard_rows", [0, 2], ids=["global-plan", "sharded-plan"])
def test_an_oversized_row_is_named_by_its_file_and_row_under_ray(tmp_path, shard_rows):
    """As the local engine: the second input's row 1, not "sequence 4" across both inputs."""
    small, giant = tmp_path / "small.jsonl", tmp_path / "giant.jsonl"
    small.write_text("".join(json.dumps({"text": "a short document"}) + "\n" for _ in range(3)))
    giant.write_text(json.dumps({"text": "short"}) + "\n" + json.dumps({"text": "word " * 600}) + "\n")
    with pytest.raises(PacktoolError, match=r"giant\.jsonl, row 1: 602 tokens; aligned footprint") as e:
        pack_ray([str(small), str(giant)], Alignment(capacity=128), PackingConfig(),
                 TokenizeConfig(tokenizer=GPT2), output=str(tmp_path / "out"),
                 cache_dir=str(tmp_path / "c"), plan_shard_rows=shard_rows)
    assert "sequence 4" not in str(e.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("shard_rows", [0, 64], ids=["global-plan", "sharded-plan"])
def test_side_columns_on_ray_are_the_local_bytes(tmp_path, shard_rows):
    """Side columns (a float32 and a K-wide int32 one) through the Ray write: routed with
    their segments and written by the shard tasks, the same files as the local engine."""
    from side_support import check_output, side_rows, write_input
    ids, lp, sup = side_rows(n=200)
    inp = write_input(str(tmp_path / "in.parquet"), ids, lp, sup)
    cfg = TokenizeConfig(shape="tokens", side_columns=("lp",), support_columns=("sup",))
    al, pk = Alignment(tp=2, cp=2, capacity=256), PackingConfig("bfd", overflow="split")
    pack([inp], al, pk, cfg, output=str(tmp_path / "l"), cache_dir=str(tmp_path / "c"), shard_tokens=4096,
         plan_shard_rows=shard_rows)
    pack_ray([inp], al, pk, cfg, output=str(tmp_path / "r"), cache_dir=str(tmp_path / "c2"), shard_tokens=4096,
             plan_shard_rows=shard_rows)
    _same_files(str(tmp_path / "l"), str(tmp_path / "r"))
    assert check_output(str(tmp_path / "r"), ids, lp, sup) > 0


def test_unrendered_chat_keys_are_said_as_locally(tmp_path):
    """S33-7 on Ray: the chat keys the template does not render are counted over every block
    and said in the local engine's note, kept in cache.json and said again when it is reused."""
    from packtool import notes
    data = tmp_path / "d.jsonl"
    rows = [{"messages": [{"role": "user", "content": f"Q{i}"},
                          {"role": "assistant", "content": f"A{i}", **({"thinking": "T"} if i % 3 else {})}],
             **({"tools": [{"type": "function", "function": {"name": "f"}}]} if i == 7 else {})} for i in range(40)]
    data.write_text("\n".join(map(json.dumps, rows)) + "\n")
    cfg = TokenizeConfig(tokenizer=GPT2, chat_template="chatml", batch_size=8)
    pk, al = PackingConfig("bfd", seed=1), Alignment(capacity=1024)
    said = []
    for run, (fn, cache) in enumerate([(pack, "c1"), (pack_ray, "c2"), (pack_ray, "c2")]):
        start = notes.mark()
        fn([str(data)], al, pk, cfg, output=str(tmp_path / f"o{run}"), cache_dir=str(tmp_path / cache))
        said.append([n for n in notes.since(start) if "does not render these keys" in n])
    assert said[0] == said[1] == said[2] and len(said[0]) == 1, said
    assert "messages[].thinking (26 rows, first row 1); tools (1 row, first row 7)" in said[0][0]


@pytest.mark.parametrize("on_empty", ["skip", "error"])
def test_rows_of_no_trained_turn_name_their_roles_as_locally(tmp_path, on_empty):
    """Stop 40 Left 1 on Ray: a chat row whose reply is under a role of no known meaning is
    named with its roles in the same words as the local engine: the refusal (error), or the
    per-file note, cache.json's counts and the summary's roles (skip), over every block."""
    from packtool import notes
    data = tmp_path / "d.jsonl"
    rows = [{"messages": [{"role": "user", "content": f"Q{i}"},
                          {"role": "narrator" if i % 9 == 4 else "assistant", "content": f"A{i}"}]} for i in range(40)]
    data.write_text("\n".join(map(json.dumps, rows)) + "\n")
    cfg = TokenizeConfig(tokenizer=GPT2, chat_template="chatml", batch_size=8, on_empty=on_empty)
    pk, al = PackingConfig("bfd", seed=1), Alignment(capacity=1024)
    said, results = [], []
    runs = [(pack, "c1"), (pack_ray, "c2"), (pack_ray, "c2")]  # the last: the Ray cache reused
    for run, (fn, cache) in enumerate(runs if on_empty == "skip" else runs[:2]):
        start = notes.mark()
        try:
            results.append(fn([str(data)], al, pk, cfg, output=str(tmp_path / f"o{run}"),
                              cache_dir=str(tmp_path / cache)).summary.skipped_roles)
        except PacktoolInputError as e:
            results.append(str(e))
        said.append([n for n in notes.since(start) if "had no trained turn" in n])
    assert all(r == results[0] for r in results), results
    if on_empty == "error":
        assert "row 4: " in results[0] and "its turns' roles are 'user', 'narrator'" in results[0], results
    else:
        assert results[0] == {"user": 4, "narrator": 4}, results
        assert said[0] == said[1] == said[2] and len(said[0]) == 1, said
        assert "'narrator' (4 rows, first row 4)" in said[0][0], said
