"""PackedSlabDataset when the training CP differs from the packed CP (issue 13, item 6): the
zigzag is re-derived when the packed segments divide into 2*cp chunks, otherwise one line
names the re-pack; cp_size follows cp_group; `packtool train` picks its device in one line."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("megatron.core")
typer = pytest.importorskip("typer")
from megatron_slabs import greedy_bins, random_sequences, thread_cp_groups, write_slab_dir  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from packtool.align import Alignment  # noqa: E402
from packtool.layout import cp_rank_index  # noqa: E402
from packtool.megatron.dataset import PackedSlabDataset  # noqa: E402


def _packed(tmp_path, cp: int) -> str:
    align = Alignment(cp=cp, capacity=128)
    seqs = random_sequences(24, 3, 60, seed=cp)
    return str(write_slab_dir(str(tmp_path / f"cp{cp}"), seqs, greedy_bins(seqs, align), align))


def _full_batches(path):
    ds = PackedSlabDataset(path, cp_size=1, seed=3)
    return [mb for st in ds.steps(max_steps=ds.steps_per_epoch()) for mb in st.micro_batches if mb]


@pytest.mark.parametrize("packed_cp,train_cp", [(4, 2), (4, 1), (2, 1)])
def test_smaller_training_cp_re_derives_the_zigzag(tmp_path, packed_cp, train_cp):
    path = _packed(tmp_path, packed_cp)
    full = _full_batches(path)
    per_rank = []
    for r in range(train_cp):
        ds = PackedSlabDataset(path, cp_rank=r, cp_size=train_cp, seed=3)
        per_rank.append([mb for st in ds.steps(max_steps=ds.steps_per_epoch())
                         for mb in st.micro_batches if mb])
    assert all(len(b) == len(full) for b in per_rank)
    for k, whole in enumerate(full):
        cu = whole.params.cu_seqlens_q_padded.numpy().astype(np.int64)
        seg_pad = np.diff(cu)
        ids = whole.input_ids[0].numpy()
        for r in range(train_cp):
            mb = per_rank[r][k]
            assert mb.params.cp_size == train_cp and mb.params.cp_rank == r
            want = ids[cp_rank_index(cu[:-1], seg_pad, train_cp, r)] if train_cp > 1 else ids
            np.testing.assert_array_equal(mb.input_ids[0].numpy(), want)


@pytest.mark.parametrize("packed_cp,train_cp", [(1, 2), (2, 4), (2, 3)])
def test_larger_training_cp_is_refused_with_the_exact_fix(tmp_path, packed_cp, train_cp):
    path = _packed(tmp_path, packed_cp)
    with pytest.raises(ValueError) as e:
        PackedSlabDataset(path, cp_size=train_cp)
    msg = str(e.value)
    assert "\n" not in msg
    assert f"packed for cp={packed_cp}" in msg and f"training cp={train_cp}" in msg
    assert msg.endswith(f"re-pack with cp={train_cp}")


def test_cp_size_follows_the_cp_group(tmp_path):
    """The docs' old snippet passed cp_group but no cp_size: the group's size is the CP."""
    path = _packed(tmp_path, 2)
    groups = thread_cp_groups(4)
    with pytest.raises(ValueError, match="training cp=4 .*re-pack with cp=4"):
        PackedSlabDataset(path, cp_rank=3, cp_group=groups[3])
    ds = PackedSlabDataset(_packed(tmp_path, 4), cp_rank=3, cp_group=groups[3])
    assert ds.cp_size == 4


def test_cp_size_and_group_must_agree(tmp_path):
    path = _packed(tmp_path, 4)
    with pytest.raises(ValueError, match="cp_size=2 but cp_group has 4 ranks"):
        PackedSlabDataset(path, cp_rank=0, cp_size=2, cp_group=thread_cp_groups(4)[0])
    with pytest.raises(ValueError, match="cp_rank 2 out of range for cp_size 2"):
        PackedSlabDataset(path, cp_rank=2, cp_size=2)


def test_training_md_snippet_passes_cp_size():
    import os
    here = os.path.dirname(os.path.abspath(__file__))
    doc = open(os.path.join(here, "..", "..", "docs", "TRAINING.md")).read()
    snippet = doc[doc.index("ds = PackedSlabDataset("):]
    snippet = snippet[:snippet.index(")")]
    assert "cp_size=" in snippet and "cp_group=" in snippet


# ---------------------------------------------------------------- `packtool train` device

@pytest.fixture
def train_app():
    from packtool.cli.failure import guarded
    from packtool.megatron.train_cli import train_command
    app = typer.Typer()
    app.command("train")(guarded(train_command))
    app.command("noop")(lambda: None)
    return app


def test_train_without_device_picks_cpu_in_one_line_when_torch_sees_no_gpu(tmp_path, train_app, monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    path = _packed(tmp_path, 1)
    r = CliRunner().invoke(train_app, ["train", path, "--steps", "1", "--layers", "1",
                                       "--hidden", "32", "--heads", "2", "--ffn", "64"])
    assert r.exit_code == 0, r.output
    lines = [ln for ln in r.stderr.splitlines() if "device" in ln]
    assert lines == ["packtool train: device cpu: torch sees no CUDA device (pass --device cuda "
                     "to require one)"]
    assert "Traceback" not in r.output


def test_train_device_cuda_without_gpu_is_one_line(tmp_path, train_app, monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    r = CliRunner().invoke(train_app, ["train", _packed(tmp_path, 1), "--device", "cuda", "--steps", "1"])
    assert r.exit_code == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "sees no CUDA device" in lines[0] and "--device cpu" in lines[0]
    assert "Traceback" not in r.output
