"""Every `train` flag that needs a CUDA device is refused on a CPU run before any work, naming
the flag and the fix: `--lm-head fused --device cpu` built the model, then failed naming the
library's `impl='torch'` (S41-5)."""
from __future__ import annotations

import pytest

pytest.importorskip("megatron.core")

from megatron_runs import run_cli, slabs  # noqa: E402,F401

from packtool.errors import PacktoolConfigError  # noqa: E402
from packtool.megatron.loop import TrainConfig  # noqa: E402

SMALL = ["--layers", "1", "--hidden", "32", "--heads", "2", "--steps", "1"]
CASES = {  # flags on a CPU run -> what the line names
    "--lm-head fused": (["--device", "cpu", "--lm-head", "fused"], ["--lm-head fused", "--device cuda",
                                                                    "--lm-head torch or auto"]),
    "--fp8 mxfp8": (["--device", "cpu", "--fp8", "mxfp8"], ["--fp8 mxfp8"]),
    "--device cuda": (["--device", "cuda"], ["--device cuda", "--device cpu"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_cuda_flag_on_cpu_is_refused_before_the_model(slabs, tmp_path, monkeypatch, case):  # noqa: F811
    import torch
    if case == "--device cuda" and torch.cuda.is_available():
        pytest.skip("a CUDA device is here")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.chdir(tmp_path)
    flags, named = CASES[case]
    r = run_cli(["train", slabs, *SMALL, *flags])
    lines = r.stderr.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert all(n in lines[0] for n in named) and "impl=" not in lines[0], lines[0]
    assert "GPTModel" not in r.stdout and list(tmp_path.iterdir()) == []  # nothing built, nothing written


def test_the_library_names_its_arguments_and_the_interpreter_is_let_through(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(PacktoolConfigError, match=r"lm_head='fused' needs device='cuda' .* give lm_head='torch'"):
        TrainConfig(data_dir="d", lm_head="fused", device="cpu")
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the tests' CPU runs of the fused head
    assert TrainConfig(data_dir="d", lm_head="fused", device="cpu").lm_head == "fused"
