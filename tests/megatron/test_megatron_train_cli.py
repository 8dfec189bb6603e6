"""`packtool train` (train_cli.train_command) on CPU: flags, YAML config, layout checks."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("megatron.core")
typer = pytest.importorskip("typer")
from leftover_support import snapshot  # noqa: E402
from megatron_runs import TINY, run_cli, small_slabs  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from packtool.cli.failure import guarded  # noqa: E402
from packtool.megatron.train_cli import train_command  # noqa: E402

app = typer.Typer()
app.command("train")(guarded(train_command))
app.command("noop")(lambda: None)  # keep `train` a subcommand, as under packtool's app


@pytest.fixture(scope="module")
def slabs(tmp_path_factory):
    return small_slabs(tmp_path_factory.mktemp("c") / "d", fp8="tensorwise")


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
    (tmp_path / "FILE").write_text("a user's file\n")
    flags = [str(tmp_path / f) if f == "FILE" else f for f in flags]
    r = run_cli(["train", slabs, "--device", "cpu", "--steps", "1", *flags])
    assert r.exit_code == 2, r.output
    line = r.stderr.strip().splitlines()[-1]
    import re
    assert line.startswith("error: ") and said in line and not re.search(rf"(?<![-\w]){re.escape(lib)}", line), line


# --- every file `train` writes (--json-log, --save) follows packtool.output's rules -------

USER = b"a user's file\n"


def _bad_target(kind, tmp_path):
    """(output flags, the user's file that must stay byte-identical, what the error says)."""
    cfg = tmp_path / "m.yaml"
    cfg.write_text("layers: 1\nhidden: 32\nheads: 2\n")
    (tmp_path / "ld").mkdir()
    (tmp_path / "ld" / "mp_rank_00.pt").write_bytes(USER)  # refused before it is ever loaded
    (tmp_path / "mine.txt").write_bytes(USER)
    return {
        "--json-log an existing file": (["--config", str(cfg), "--json-log", str(tmp_path / "mine.txt")],
                                        tmp_path / "mine.txt", "exists; pass --overwrite"),
        "--json-log the --config": (["--config", str(cfg), "--json-log", str(cfg), "--overwrite"],
                                    cfg, "is the input"),
        "--json-log a --load file": (["--load", str(tmp_path / "ld"), "--overwrite",
                                      "--json-log", str(tmp_path / "ld" / "mp_rank_00.pt")],
                                     tmp_path / "ld" / "mp_rank_00.pt", "is the input"),
        "--save a folder with a user's file": (["--config", str(cfg), "--save", str(tmp_path), "--overwrite"],
                                              tmp_path / "mine.txt", "holds other files"),
    }[kind]


@pytest.mark.parametrize("kind", ["--json-log an existing file", "--json-log the --config",
                                  "--json-log a --load file", "--save a folder with a user's file"])
def test_train_outputs_refuse_what_packtool_must_not_write(slabs, tmp_path, kind):
    flags, kept, said = _bad_target(kind, tmp_path)
    before = snapshot(tmp_path, skip=())
    r = run_cli(["train", slabs, "--device", "cpu", "--steps", "1", *flags])
    assert r.exit_code == 2, r.output
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and said in errors[0] and kept.name in errors[0], r.stderr
    assert snapshot(tmp_path, skip=()) == before
    assert not (tmp_path / "mp_rank_00.pt").exists()


def test_train_json_log_continues_its_own_log_and_replaces_another_only_with_overwrite(slabs, tmp_path):
    log = tmp_path / "l.jsonl"
    args = ["train", slabs, *TINY, "--steps", "1", "--json-log", str(log)]
    r = CliRunner().invoke(app, args + ["--save", str(tmp_path / "ck")])
    assert r.exit_code == 0, r.output
    first = log.read_bytes()
    # a new run (no --load) never continues another run's log: two runs' steps 0.. mixed in one file (S41-10)
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2 and log.read_bytes() == first, r.output
    out = " ".join(r.output.split())
    assert "is the log of another packtool train run (it ends at step 0); only a run resumed with" in out, out
    assert "overwrite" in out and "Traceback" not in out
    r = CliRunner().invoke(app, ["train", slabs, *TINY, "--steps", "1", "--json-log", str(log),
                                 "--load", str(tmp_path / "ck")])  # a resumed run continues it
    assert r.exit_code == 0, r.output
    assert [json.loads(x)["step"] for x in log.read_text().splitlines()] == [0, 1]
    r = CliRunner().invoke(app, args + ["--overwrite"])  # a new run starts it anew
    assert r.exit_code == 0, r.output
    assert [json.loads(x)["step"] for x in log.read_text().splitlines()] == [0]
    log.write_bytes(USER)
    r = CliRunner().invoke(app, args + ["--overwrite"])
    assert r.exit_code == 0, r.output
    assert [json.loads(x)["step"] for x in log.read_text().splitlines()] == [0]


@pytest.mark.parametrize("resume_at, said", [(1, None), (2, "steps 1..1 are missing"), (0, "steps 0..0 appear twice")])
def test_a_resumed_run_that_does_not_follow_its_log_says_so(slabs, tmp_path, resume_at, said):
    import packtool.notes as N
    log = tmp_path / "l.jsonl"
    base = ["train", slabs, *TINY]
    assert CliRunner().invoke(app, base + ["--steps", "1", "--json-log", str(log)]).exit_code == 0  # ends at step 0
    ck = tmp_path / "ck"
    r = CliRunner().invoke(app, base + ["--steps", str(resume_at), "--save", str(ck)])  # 0: the initial weights
    assert r.exit_code == 0, r.output
    start = N.mark()
    r = CliRunner().invoke(app, base + ["--steps", "1", "--load", str(ck), "--json-log", str(log)])
    assert r.exit_code == 0, r.output
    gap = [x for x in N.since(start) if "l.jsonl ends at step" in x]
    assert [json.loads(x)["step"] for x in log.read_text().splitlines()] == [0, resume_at]
    if said is None:
        assert gap == []
    else:
        assert len(gap) == 1 and f"ends at step 0 but this run resumes at step {resume_at}" in gap[0] and said in gap[0]
