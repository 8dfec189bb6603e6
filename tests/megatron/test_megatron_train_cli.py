"""`packtool train` (train_cli.train_command) on CPU: flags, YAML config, layout checks."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("megatron.core")
typer = pytest.importorskip("typer")
from megatron_slabs import greedy_bins, random_sequences, write_slab_dir  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from packtool.align import Alignment  # noqa: E402
from packtool.cli.failure import guarded  # noqa: E402
from packtool.megatron.train_cli import train_command  # noqa: E402

app = typer.Typer()
app.command("train")(guarded(train_command))
app.command("noop")(lambda: None)  # keep `train` a subcommand, as under packtool's app


@pytest.fixture(scope="module")
def slabs(tmp_path_factory):
    align = Alignment(fp8="tensorwise", capacity=64)
    seqs = random_sequences(12, 3, 30, seed=8)
    return str(write_slab_dir(str(tmp_path_factory.mktemp("c") / "d"), seqs,
                              greedy_bins(seqs, align), align))


def test_cli_import_is_light():
    code = ("import sys, packtool.megatron.train_cli; "
            "assert 'torch' not in sys.modules and 'megatron' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_train_cpu_with_yaml_config(slabs, tmp_path):
    cfg = tmp_path / "m.yaml"
    cfg.write_text("layers: 1\nhidden: 32\nheads: 2\nffn: 64\n")
    log = tmp_path / "l.jsonl"
    r = CliRunner().invoke(app, ["train", slabs, "--device", "cpu", "--steps", "2",
                                 "--config", str(cfg), "--json-log", str(log),
                                 "--micro-batch-tokens", "128", "--grad-accum", "3",
                                 "--log-every", "1", "--save", str(tmp_path / "ck")])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in log.read_text().splitlines()]
    assert [x["step"] for x in rows] == [0, 1] and all(x["loss"] > 0 for x in rows)
    assert "real tok/s" in r.output and "MFU" in r.output
    assert (tmp_path / "ck" / "mp_rank_00.pt").exists()


@pytest.mark.parametrize("flags, fix", [(["--cp", "2"], "--cp 2"),
                                        (["--cp", "2", "--fp8", "tensorwise"], "--cp 2 --fp8 tensorwise"),
                                        (["--tp", "32", "--fp8", "blockwise"], "--tp 32")])
def test_layout_mismatch_names_the_repack(slabs, flags, fix):
    r = CliRunner().invoke(app, ["train", slabs, "--device", "cpu", "--steps", "1", *flags])
    assert r.exit_code == 2
    out = " ".join(r.output.split())
    assert "Re-pack with" in out and fix in out, out


@pytest.mark.parametrize("flags, said, lib", [
    (["--micro-batch-tokens", "3"], "--micro-batch-tokens 3", "micro_batch_tokens=3"),
    (["--grad-accum", "0"], "--grad-accum", "grad_accum"),
    (["--save", "FILE"], "--save", "save"),
    (["--fp8", "mxfp8"], "--fp8 mxfp8", "fp8='mxfp8'")])
def test_trainer_errors_name_the_flag_on_the_command_line(slabs, tmp_path, flags, said, lib):
    """The trainer (TrainConfig, the loop, the dataset) names its arguments; `packtool train`
    names the flags (errors.arg, FLAG_OF), never the library's spelling."""
    from packtool.cli.app import app as packtool_app
    (tmp_path / "FILE").write_text("a user's file\n")
    flags = [str(tmp_path / f) if f == "FILE" else f for f in flags]
    r = CliRunner().invoke(packtool_app, ["train", slabs, "--device", "cpu", "--steps", "1", *flags])
    assert r.exit_code == 2, r.output
    line = r.stderr.strip().splitlines()[-1]
    import re
    assert line.startswith("error: ") and said in line and not re.search(rf"(?<![-\w]){re.escape(lib)}", line), line
