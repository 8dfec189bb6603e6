"""Every check a user's input, flag or argument reaches raises packtool's own error type
(packtool/errors.py), one line naming the argument (library) or the flag (command line) and the
fix: `--split` with two inputs or `--engine ray` was a plain ValueError, `pack -` said "input
file not found" in the library and "stdin not supported" on the command line, `train`'s
`--vocab-size`, `--config`, `--device cuda`, `--load` checks and the library's packers, layout,
online and megatron checks raised ValueError/KeyError/IndexError/FileNotFoundError.

A guard scans packtool/ for a raise of a built-in exception type (and a bare assert): each one
left is an internal invariant no input reaches, listed below with the reason."""
from __future__ import annotations

import ast
import json
import pathlib
import re

import numpy as np
import pytest
from typer.testing import CliRunner

import packtool
from packtool.align import Alignment
from packtool.cli.app import app
from packtool.errors import EXIT_USAGE, PacktoolError
from packtool.planning.core import PackingConfig
from packtool.tokenize.config import TokenizeConfig

runner = CliRunner()
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
ROOT = pathlib.Path(packtool.__file__).parent


def _ids(tmp) -> str:
    p = tmp / "ids.jsonl"
    if not p.exists():
        p.write_text("".join(json.dumps({"input_ids": list(range(1, 2 + i))}) + "\n" for i in range(6)))
    return str(p)


def _packed(tmp, name="slabs", **align) -> str:
    """Slabs packed from token ids (no tokenizer: no vocabulary recorded, largest id 6)."""
    out = tmp / name
    if not out.exists():
        dp = align.pop("dp", 1)
        packtool.pack([_ids(tmp)], Alignment(capacity=64, **align), PackingConfig(dp=dp), output=str(out),
                      cache_dir=str(tmp / "cache"))
    return str(out)


def _pack(tmp, *args):
    return ["pack", *args, "-C", "64", "-o", str(tmp / "out"), "--cache-dir", str(tmp / "cache")]


def _train(tmp, *args, data=None):
    base = {"--device": "cpu", "--layers": "1", "--hidden": "64", "--heads": "4", "--steps": "1"}
    for k in set(base) & set(args[0::2]):  # a case's own value replaces the base's (a flag given twice is refused)
        del base[k]
    return ["train", data or _packed(tmp), *[w for kv in base.items() for w in kv], *args]


def _megatron():
    pytest.importorskip("megatron.core", reason="the train extra is not installed")


def _dataset(tmp, **kw):
    _megatron()
    from packtool.megatron.dataset import PackedSlabDataset
    data = kw.pop("data", None) or _packed(tmp)
    PackedSlabDataset(data, **kw)


def _yaml(tmp) -> str:
    (tmp / "shape.yaml").write_text("layers: 1\nlayerz: 2\n")
    return str(tmp / "shape.yaml")


def _no_cuda():
    import torch
    if torch.cuda.is_available():
        pytest.skip("torch sees a GPU here: --device cuda is taken")


def _cache_rows(tmp):
    from packtool.tokenize import tokenize_to_cache
    tokenize_to_cache([_ids(tmp)], TokenizeConfig(), str(tmp / "cache"), progress=False).read_rows([6])


def _hf_row(tmp):
    pytest.importorskip("datasets", reason="the hf extra is not installed")
    from packtool.hf import SlabDataset
    ds = SlabDataset(_packed(tmp))
    ds[len(ds)]


def _attention(tmp, **cfg):
    _megatron()
    from megatron.core.transformer.transformer_config import TransformerConfig

    from packtool.megatron.attention import PackedCoreAttention
    PackedCoreAttention(TransformerConfig(num_layers=1, hidden_size=64, num_attention_heads=4, **cfg), 1, None, "self")


def _support(tmp):
    torch = pytest.importorskip("torch")
    from packtool.online.support import support_logprobs_hf
    support_logprobs_hf({"labels": torch.zeros(1, 4, dtype=torch.long)}, torch.zeros(1, 4, 8), torch.zeros(16, 8))


def _rl(tmp, **kw):
    torch = pytest.importorskip("torch")
    from packtool.online.rl import clipped_policy_loss
    z = torch.zeros(4)
    seg = kw.pop("segment", torch.zeros(4, dtype=torch.long))
    clipped_policy_loss(z, z, z, torch.ones(4), seg, torch.ones(1), **kw)


def _thd(tmp):
    _megatron()
    from packtool.megatron.thd import make_thd_batch
    make_thd_batch(np.arange(8), np.ones(8, np.uint8), np.array([4]), np.array([6]))


def _load(tmp):
    _megatron()
    from packtool.megatron.loop import load_checkpoint
    load_checkpoint(str(tmp / "no-checkpoint"), 0)


def _rope(tmp):
    _megatron()
    from packtool.megatron.model import GPTShape, build_gpt
    build_gpt(GPTShape(layers=1, hidden=64, heads=4, ffn=256, vocab=128, max_seq=64), rope="alibi")


def _fp8_shape(tmp):
    _megatron()
    from packtool.megatron.fp8 import check_shape
    check_shape("blockwise", 64, 256, 64)


def _budget(tmp):
    from packtool.megatron.batching import plan_epoch
    plan_epoch(None, Alignment(tp=2, capacity=64), 1, 0, 0, 0, 1, 1, False, 0)


def _source_store(tmp):
    from packtool.verification.source import source_store
    source_store(["-"], TokenizeConfig(), cache_dir=str(tmp / "cache"))


def _plan_shards(tmp):
    from packtool.tokenize import tokenize_to_cache
    from packtool.tokenize.cache import cache_shards
    cache_shards(tokenize_to_cache([_ids(tmp)], TokenizeConfig(), str(tmp / "cache"), progress=False), 0)


def _assign_dp(tmp, bins, capacity=8, sizes=None):
    from packtool.packers import assign_dp
    n = len(bins) if sizes is None else sizes
    assign_dp(np.array(bins), np.ones(n, np.int64), np.ones(len(bins), np.int64), capacity, 1)


def _pack_items(tmp, sizes=(1, 2), capacity=8, algorithm="ffd"):
    from packtool.packers import pack_items
    pack_items(np.array(sizes), capacity, algorithm)


def _layout(tmp, what):
    from packtool import layout
    if what == "shift":
        layout.shift_like_labels(np.zeros(4), np.array([0, 3]), 0.0)
    elif what == "rank":
        layout.cp_rank_index(np.array([0]), np.array([8]), 2, 2)
    else:
        layout.cp_chunk_ranges(np.array([0]), np.array([6]), 2)


def _side_damaged(tmp) -> str:
    """A pack with a per-token side column whose first slab holds one value fewer than its tokens,
    re-signed so that the checksum is not what refuses it."""
    out = tmp / "side"
    if out.exists():
        return str(out)
    import pyarrow as pa
    import pyarrow.parquet as pq
    from side_support import side_rows, write_input
    from slab_support import resign
    ids, lp, sup = side_rows(n=20, long=90)
    write_input(str(tmp / "side.parquet"), ids, lp, sup)
    packtool.pack([str(tmp / "side.parquet")], Alignment(capacity=256), output=str(out),
                  tokenize=TokenizeConfig(shape="tokens", side_columns=("lp",)), cache_dir=str(tmp / "cache"))
    shard = sorted(p.name for p in out.glob("*.parquet"))[0]
    t = pq.read_table(out / shard)
    col = t.column("lp").to_pylist()
    col[0] = col[0][:-1]
    t = t.set_column(t.schema.get_field_index("lp"), "lp", pa.array(col, t.schema.field("lp").type))
    pq.write_table(t, out / shard)
    resign(str(out), shard)
    return str(out)


def _side_row(tmp):
    pytest.importorskip("datasets", reason="the hf extra is not installed")
    from packtool.hf import SlabDataset
    SlabDataset(_side_damaged(tmp))[0]


def _side_reader(tmp):
    from packtool.slabs.format import SlabManifest
    from packtool.slabs.reader import SlabIndex, SlabReader
    m = SlabManifest.read(_side_damaged(tmp))
    SlabReader(m, SlabIndex.build(m)).row(0)


# case -> (library call or None, the words its message names, command line (tmp) or None, the flag
# the line names). Library-only cases are checks of a call the command line never makes wrongly;
# command-line-only cases are flags the library has no argument for.
CASES = {
    "stdin (pack)": (lambda t: packtool.pack(["-"], Alignment(capacity=64), output=str(t / "out"),
                                             cache_dir=str(t / "cache")), ["inputs '-'", "stdin", "save the data"],
                     lambda t: _pack(t, "-"), "INPUTS '-'"),
    "stdin (verify --source)": (_source_store, ["inputs '-'", "stdin"],
                                lambda t: ["verify", _packed(t), "--source", "-"], "--source '-'"),
    "--split with two inputs": (None, [], lambda t: _pack(t, _ids(t), _ids(t), "--split", "train"), "--split"),
    "--config with two inputs": (None, [], lambda t: _pack(t, "a/b", "c/d", "--config", "x"), "--config"),
    "--split with --engine ray": (None, [], lambda t: _pack(t, "org/name", "--split", "train", "--engine", "ray"),
                                  "--engine ray"),
    "dataset name with --engine ray": (None, [], lambda t: _pack(t, "org/name", "--engine", "ray"), "--engine ray"),
    "train --config unknown key": (None, [], lambda t: _train(t, "--config", _yaml(t)), "--config"),
    "train --device cuda without one": (None, [], lambda t: (_no_cuda(), _train(t, "--device", "cuda"))[1],
                                        "--device cpu"),
    "train --vocab-size 0": (None, [], lambda t: _train(t, "--vocab-size", "0"), "--vocab-size"),
    "train without a vocabulary": (None, [], lambda t: _train(t), "--vocab-size"),
    "train --vocab-size below an id": (None, [], lambda t: _train(t, "--vocab-size", "3"), "--vocab-size 3"),
    "train --load missing": (_load, ["no such folder", "give load the folder"],
                             lambda t: _train(t, "--load", str(t / "no-checkpoint")), "--load"),
    "dataset dp": (lambda t: _dataset(t, data=_packed(t, "dp2", dp=2)), ["dp=2", "dp=1"], None, ""),
    "dataset dp_rank": (lambda t: _dataset(t, dp_rank=1), ["dp_rank=1"], None, ""),
    "dataset grad_accum": (lambda t: _dataset(t, grad_accum=0), ["grad_accum"], None, ""),
    "dataset cp": (lambda t: _dataset(t, cp_size=2), ["cp=2"], None, ""),
    "dataset cp_size": (lambda t: _dataset(t, cp_size=0), ["cp_size"], None, ""),
    "dataset cp_rank": (lambda t: _dataset(t, cp_rank=3), ["cp_rank"], None, ""),
    "micro_batch_tokens": (_budget, ["micro_batch_tokens=1"], None, ""),
    "rope": (_rope, ["rope"], None, ""),
    "fp8 shape": (_fp8_shape, ["fp8='blockwise'", "hidden"], None, ""),
    "attention dropout": (lambda t: _attention(t, attention_dropout=0.1), ["attention_dropout"], None, ""),
    "attention window": (lambda t: _attention(t, attention_dropout=0.0, window_size=(8, 0)), ["window_size"],
                         None, ""),
    "thd lengths": (_thd, ["seg_padded"], None, ""),
    "rl aggregate": (lambda t: _rl(t, aggregate="mean"), ["aggregate"], None, ""),
    "rl shapes": (lambda t: _rl(t, segment=np.zeros(3)), ["segment"], None, ""),
    "support column missing": (_support, ["support"], None, ""),
    "cache row index": (_cache_rows, ["indices", "row 6"], None, ""),
    "hf slab index": (_hf_row, ["slab"], None, ""),
    "plan_shard_rows": (_plan_shards, ["plan_shard_rows"], None, ""),
    "pack_items algorithm": (lambda t: _pack_items(t, algorithm="nfd"), ["algorithm"], None, ""),
    "pack_items capacity": (lambda t: _pack_items(t, capacity=0), ["capacity"], None, ""),
    "pack_items sizes": (lambda t: _pack_items(t, sizes=(1, 9)), ["sizes[1]"], None, ""),
    "pack_items sizes shape": (lambda t: _pack_items(t, sizes=[[1]]), ["sizes"], None, ""),
    "assign_dp lengths": (lambda t: _assign_dp(t, [0, 0], sizes=3), ["bin_of_item", "sizes"], None, ""),
    "assign_dp empty bin": (lambda t: _assign_dp(t, [0, 0, 2]), ["bin_of_item"], None, ""),
    "assign_dp capacity": (lambda t: _assign_dp(t, [0, 0, 0], capacity=2), ["capacity=2"], None, ""),
    "shift_like_labels": (lambda t: _layout(t, "shift"), ["cu_seqlens_padded"], None, ""),
    "cp_rank_index": (lambda t: _layout(t, "rank"), ["cp_rank=2"], None, ""),
    "cp_chunk_ranges": (lambda t: _layout(t, "chunks"), ["seg_padded", "cp=2"], None, ""),
    # a damaged output: the reader names the shard, row group, row and the side column
    "side column length (hf)": (_side_row, ["side column 'lp'", "row 0", "packtool verify"],
                                lambda t: ["inspect", _side_damaged(t)], "side column 'lp'"),
    "side column length (reader)": (_side_reader, ["side column 'lp'", "row group 0 row 0"], None, ""),
}


@pytest.mark.parametrize("case", sorted(c for c in CASES if CASES[c][0]))
def test_the_library_raises_its_own_error_naming_the_argument(tmp_path, case):
    call, words, _, _ = CASES[case]
    with pytest.raises(PacktoolError) as e:
        call(tmp_path)
    msg = str(e.value)
    assert "\n" not in msg and not FLAG.search("".join(msg.split("`")[0::2])), msg  # `a command` may
    for w in words:
        assert w in msg, msg


@pytest.mark.parametrize("case", sorted(c for c in CASES if CASES[c][2]))
def test_the_command_line_says_one_line_naming_the_flag(tmp_path, case):
    _, _, argv, flag = CASES[case]
    args = argv(tmp_path)
    json_out = args[0] != "train"  # train prints its steps, not one object: no --json
    r = runner.invoke(app, [*args, "--json"] if json_out else args)
    assert r.exit_code == EXIT_USAGE, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    errors = [x for x in lines if x.startswith("error: ")]
    assert len(errors) == 1 and flag in errors[0], lines
    assert "Traceback" not in r.stdout + r.stderr, lines
    if json_out:
        said = json.loads(r.stdout.strip().splitlines()[-1])["error"]
        assert said["type"] not in BUILTIN and said["kind"] != "internal", said  # packtool's own type


def test_an_index_out_of_range_is_still_an_index_error(tmp_path):
    """`__getitem__` ends iteration (and datasets', torch's samplers') on an IndexError."""
    with pytest.raises(IndexError):
        _cache_rows(tmp_path)


# raises of built-in types left in packtool/, each an invariant no input reaches:
# (file, function) -> why
INTERNAL = {
    ("params.py", "checked"): "a packtool bug: every argument checked there has a rule",
    ("output/lock.py", "take"): "a short write said as the ENOSPC it is, caught by the next except and said as "
                                "_cannot_lock's PacktoolOutputError (tests/output/test_no_room_for_lock.py)",
    ("output/leftovers.py", "mark"): "os's own OSError, renamed for the marker it failed on: the room line naming "
                                     "the place's argument says it (tests/output/test_no_room_for_lock.py)",
    ("planning/slabs.py", "plan"): "segments read back from the spilled routing packtool wrote",
    ("storage/location.py", "_call"): "os's own FileNotFoundError, as a local path raises it; callers catch it",
    ("storage/paths.py", "file_size"): "as os.path.getsize raises it; callers catch it",
    ("storage/paths.py", "file_stat"): "as os.stat raises it; callers catch it",
    ("slabs/check.py", "_check_shard_file"): "caught two lines below and said as a FormatError",
    ("engines/ray_cache.py", "collect_blocks"): "rows the engine's own read tasks returned",
    ("engines/ray_cache.py", "_block_of"): "blocks the engine's own tasks built",
    ("engines/ray_cache.py", "_check_parts"): "part files the engine's own tasks wrote this run",
    ("engines/ray_cache.py", "_write_part"): "blocks the engine's own tasks built, in read order",
    ("engines/ray_write.py", None): "segments and shards the engine's own plan routed",
    ("engines/ray_join.py", None): "OSErrors as ray.init raises them: ray_engine's call catches every one "
                                   "and says the --ray-address (RAY_ADDRESS) line",
    ("slabs/routed.py", None): "the routing files packtool spilled this run",
    ("layout.py", "compute_layout"): "a planner's bins are never empty",
    ("packers/_common.py", None): "the max-tree's size bound",
    ("tokenize/flat_tokens.py", None): "ids from packtool's encoder, rows checked before (negative ids "
                                       "are refused per row), offsets re-raised as CacheDamagedError",
    ("tokenize/flat_builder.py", "add"): "the tokenize step's own rows, ids, mask and lengths of one batch",
    ("tokenize/checksum.py", "_hasher"): "the algorithm is one of CHECKSUMS, chosen by packtool",
    ("kernels/row_stats.py", "row_stats_triton"): "the chunk loop (kernels/head_loop.py) hands it rows it made contiguous",
    ("kernels/softmax_grad.py", "softmax_grad_triton_"): "the chunk loop (kernels/head_loop.py) hands it rows it made contiguous",
    ("align.py", "__post_init__"): "the conventions' (s, t) are packtool's table",
    ("slabs/names.py", "shard_file"): "run ids come from new_run_id (output/store.py), never from input",
    ("slabs/names.py", "run_shard_file"): "the names are shard_file's, renamed for this run",
    ("slabs/names.py", "intent_file"): "run ids come from new_run_id (output/store.py), never from input",
    ("slabs/names.py", "proof_file"): "its run id is new_run_id's and its shard a name begin gave (output/store.py)",
}
BUILTIN = {n for n, v in vars(__import__("builtins")).items() if isinstance(v, type) and issubclass(v, BaseException)}


def _raises_of_builtins():
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text())
        for fn in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
            if fn.name == "__getattr__":
                continue  # a module's AttributeError is Python's protocol
            for node in ast.walk(fn):
                exc = node.exc if isinstance(node, ast.Raise) else None
                name = (exc.func if isinstance(exc, ast.Call) else exc)
                if isinstance(node, ast.Assert):
                    yield rel, fn.name, "assert", node.lineno
                elif isinstance(name, ast.Name) and name.id in BUILTIN:
                    yield rel, fn.name, name.id, node.lineno


def test_no_input_reaches_a_raise_of_a_builtin_type():
    left = [f"{rel}:{line} {fn}: {kind}" for rel, fn, kind, line in _raises_of_builtins()
            if (rel, fn) not in INTERNAL and (rel, None) not in INTERNAL]
    assert not left, "raise packtool's own error type (packtool/errors.py), or list the invariant in INTERNAL: " \
                     + "; ".join(left)
