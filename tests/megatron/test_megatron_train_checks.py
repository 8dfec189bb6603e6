"""`packtool train`'s model and optimizer values are checked before any work (GPTShape,
TrainConfig): each bad one is one line naming the flag, or the --config file and key, exit 2;
they were exit 3 "packtool bug", a run on NaN loss that exited 0, or `true` taken as 1."""
from __future__ import annotations

import pytest

pytest.importorskip("megatron.core")
pytest.importorskip("typer")
from megatron_runs import run_cli, small_slabs  # noqa: E402

from packtool.errors import PacktoolConfigError  # noqa: E402
from packtool.megatron.loop import TrainConfig  # noqa: E402
from packtool.megatron.model import GPTShape  # noqa: E402


@pytest.fixture(scope="module")
def slabs(tmp_path_factory):
    return small_slabs(tmp_path_factory.mktemp("c") / "d", fp8="tensorwise")


FLAGS = [("--heads 3", "--heads 3 must divide --hidden 64"), ("--layers 0", "--layers"),
         ("--hidden 0", "--hidden"), ("--ffn -1", "--ffn"), ("--lr inf", "--lr"), ("--lr nan", "--lr"),
         ("--lr -1", "--lr"), ("--warmup -1", "--warmup"), ("--steps -1", "--steps"),
         ("--log-every -1", "--log-every"), ("--save-every -2", "--save-every")]
CONFIG = [("layers: 2.5", "layers"), ('layers: "2"', "layers"), ("layers: -1", "layers"), ("layers: true", "layers"),
          ("layers: 0", "layers"), ("rope_base: -5", "rope_base"), ("rope_base: .nan", "rope_base"),
          ("rope_base: .inf", "rope_base"),
          # below 1 (S38-5's class: a value the check passed that float32 turns into NaN loss)
          ("rope_base: 1.0e-300", "rope_base must be at least 1"), ("rope_base: 0.5", "rope_base must be at least 1"),
          ("rope_base: x", "rope_base"), ("kv_heads: 3", "kv_heads=3 must divide"),
          ("hidden: 1.5", "hidden"), ("max_seq: 0", "max_seq"), ("heads: 5", "heads"),
          ("layers: [", "line 2"), ('layers: !!python/object/apply:os.system ["true"]', "line 1"),
          ("- 1", "not a mapping"), ("vocab: 5", "unknown keys"),
          # a key given twice, however spelled or nested, is refused: YAML would keep the last silently
          ("layers: 2\nhidden: 64\nhidden: 128\nheads: 4", "line 3: key 'hidden' appears twice (first at line 2)"),
          ("{hidden: 64, hidden: 128}", "line 1: key 'hidden' appears twice"),
          ("hidden: 64\n'hidden': 128", "line 2: key 'hidden' appears twice"),
          ("layers: 2\n2: 1\n0x2: 1", "line 3: key 2 appears twice"),
          ("hidden:\n  a: 1\n  a: 2", "line 3: key 'a' appears twice"),
          # S39-3: a shape below its data (RoPE takes any length: max_seq had no effect) and a file of no
          # keys (the defaults taken without a word), in every form YAML reads as nothing
          ("max_seq: 8", "max_seq=8 of the model shape is below the output's longest segment"),
          ("", "holds no keys"), ("# layers: 2", "holds no keys"), ("{}", "holds no keys"), ("~", "holds no keys"),
          # S48B-1: a number longer than Python converts was its bare ValueError, no file named
          ("layers: " + "1" * 5001, "holds an integer longer than Python reads")]


@pytest.mark.parametrize("flags, said", FLAGS + [(f"--config {y}", s) for y, s in CONFIG],
                         ids=[f for f, _ in FLAGS] + [y[:40] for y, _ in CONFIG])
def test_every_model_and_optimizer_value_is_checked_before_any_work(slabs, tmp_path, flags, said):
    args = flags.split()
    if args[0] == "--config":
        (tmp_path / "m.yaml").write_text(flags.split(" ", 1)[1] + "\n")
        args = ["--config", str(tmp_path / "m.yaml")]
    r = run_cli(["train", slabs, "--device", "cpu", "--steps", "1", "--save",
                                 str(tmp_path / "ck"), *args] if "--steps" not in flags else
                           ["train", slabs, "--device", "cpu", *args])
    assert r.exit_code == 2, r.output
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and said in errors[0], r.stderr
    if args[0] == "--config":
        assert "m.yaml" in errors[0], errors
    assert not (tmp_path / "ck").exists()  # nothing trained, nothing saved


SHAPE = dict(layers=1, hidden=32, heads=2, ffn=64, vocab=128)


@pytest.mark.parametrize("key, value", [("layers", 0), ("layers", True), ("hidden", 2.0), ("heads", 3),
                                        ("ffn", None), ("vocab", -1), ("kv_heads", 0), ("kv_heads", 3),
                                        ("max_seq", "8"), ("rope_base", 0), ("rope_base", float("nan")),
                                        ("rope_base", 1e-300), ("rope_base", 0.999),
                                        ("rope_base", False)])
def test_library_shape_names_the_argument(key, value):
    with pytest.raises(PacktoolConfigError, match=rf"\b{key}\b"):
        GPTShape(**{**SHAPE, key: value})


@pytest.mark.parametrize("key, value", [("steps", -1), ("steps", 1.5), ("warmup", -1), ("log_every", True),
                                        ("save_every", -1), ("lr", float("inf")), ("lr", -1e-3),
                                        ("weight_decay", float("nan")), ("clip_grad", -1.0)])
def test_library_train_config_names_the_argument(key, value):
    with pytest.raises(PacktoolConfigError, match=rf"^{key}\b"):
        TrainConfig(data_dir="d", **{key: value})


def _longest_segment(out):
    import numpy as np
    import pyarrow.parquet as pq
    from packtool.slabs.format import SlabManifest
    sm = SlabManifest.read(out)
    return max(int(np.diff(cu).max()) for i in range(len(sm.shards))
               for cu in pq.read_table(sm.shard_path(i), columns=["cu_seqlens_padded"]).column(0).to_pylist())


@pytest.mark.parametrize("face", ["library", "cli"])
def test_max_seq_below_the_longest_segment_is_refused_naming_it(slabs, tmp_path, face):
    """S39-3: the exact bound, on both faces: max_seq one below the longest padded segment is refused
    (naming the key, its file on the command line, and the segment's shard and row), at it trains."""
    from packtool.megatron.loop import train
    longest = _longest_segment(slabs)
    for max_seq, ok in ((longest - 1, False), (longest, True)):
        if face == "library":
            cfg = TrainConfig(data_dir=slabs, shape=GPTShape(**{**SHAPE, "vocab": 50304, "max_seq": max_seq}),
                              device="cpu", steps=1, log_every=100)
            if ok:
                train(cfg)
                continue
            with pytest.raises(PacktoolConfigError) as e:
                train(cfg)
            said = str(e.value)
        else:
            (tmp_path / "m.yaml").write_text(f"max_seq: {max_seq}\nlayers: 1\nhidden: 32\nheads: 2\n")
            r = run_cli(["train", slabs, "--device", "cpu", "--steps", "1", "--config",
                                         str(tmp_path / "m.yaml"), "--save", str(tmp_path / f"ck{max_seq}")])
            assert r.exit_code == (0 if ok else 2) and "Traceback" not in r.output, r.output
            if ok:
                continue
            errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
            assert len(errors) == 1 and f"m.yaml: max_seq={max_seq}" in errors[0], r.stderr
            assert not (tmp_path / f"ck{max_seq}").exists()
            said = errors[0]
        assert f"longest segment, {longest} tokens" in said and "slabs-00000.parquet row group" in said, said
