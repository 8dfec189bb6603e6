"""stdout that cannot be written (S43-4), for every subcommand, --help and --version, with and
without --json, as a user's shell makes it:

- a pipe whose reader left (`packtool ... | head`): exit 141 (SIGPIPE's status), nothing said;
- `> /dev/full` (a full disk behind `> file`) and a closed stdout (`>&-`): one `error:` line
  on stderr naming stdout, exit 2, no JSON object attempted on the stdout that failed.

Never a traceback. Before, --json's error object went to the same failed stdout (a traceback,
exit 1), as did --help and --version's text; `--version | head` exited 1.

Each command line is a fresh process forked from one that imported the CLI once (tests/warm_cli.py):
51 cold starts (torch and megatron-core for train) took ~4 min of CI."""
from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
from conftest import GPT2, GSM8K
from warm_cli import WarmCli

from packtool.align import Alignment
from packtool.packing import pack
from packtool.planning.core import PackingConfig
from packtool.tokenize.config import TokenizeConfig

# one worker runs the module (--dist loadgroup): one CLI server start and one packed output, not one per worker
pytestmark = pytest.mark.xdist_group("stdout_unwritable")

GSM_ARGS = ["--tokenizer", GPT2, "--prompt-field", "question", "--response-field", "answer"]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    d = tmp_path_factory.mktemp("stdout")
    np.save(d / "lengths.npy", np.random.default_rng(2).integers(10, 1000, 200))
    shutil.copy(GSM8K, d / "gsm.jsonl")
    cfg = TokenizeConfig(tokenizer=GPT2, prompt_field="question", response_field="answer")
    pack([str(d / "gsm.jsonl")], Alignment(capacity=1024), PackingConfig("bfd"), cfg,
         output=str(d / "out"), cache_dir=str(d / "cache"), progress=False)
    return d


COMMANDS = {
    "plan": ["plan", "--lengths", "{d}/lengths.npy", "-C", "1024"],
    "pack": ["pack", "{d}/gsm.jsonl", *GSM_ARGS, "-C", "1024", "-o", "{t}/packed", "--no-progress",
             "--cache-dir", "{d}/cache"],
    "plan-o": ["plan", "--lengths", "{d}/lengths.npy", "-C", "1024", "-o", "{t}/plan.parquet"],
    "inspect": ["inspect", "{d}/out"],
    "inspect-html": ["inspect", "{d}/out", "--html", "{t}/report.html"],
    "inspect-lengths": ["inspect", "--lengths", "{d}/lengths.npy", "-C", "1024"],
    "verify": ["verify", "{d}/out"],
    "train": ["train", "{d}/out", "--device", "cpu", "--steps", "1"],
    "version": ["--version"],
    "help": ["--help"],
    "pack-help": ["pack", "--help"],
    "bare": [],
}
JSON_TOO = {"plan", "plan-o", "pack", "inspect", "inspect-html", "inspect-lengths", "verify", "train", "version"}
# what each command line puts in place before its result is printed (S45B-5: plan -o's file was
# written, and the line said only "re-run", which is then refused because the file exists)
WRITES = {"pack": "the output {t}/packed", "plan-o": "the file {t}/plan.parquet",
          "inspect-html": "the file {t}/report.html"}
CASES = [(c, j) for c in COMMANDS for j in ((False, True) if c in JSON_TOO else (False,))]


# what the commands import on the way (the server imports them once; a child imports the rest)
PRELOAD = ("packtool.cli.app", "packtool.cli.printing", "packtool.packing", "packtool.planning.core",
           "packtool.planning.lengths", "packtool.planning.summary", "packtool.inspection.packed",
           "packtool.inspection.planned", "packtool.verification.run", "packtool.megatron.loop")


@pytest.fixture(scope="module")
def cli():
    server = WarmCli(PRELOAD, env=dict(os.environ, COLUMNS="80"))
    yield server
    server.close()


def _run(cli, made, tmp_path, name, json_out, stdout):
    args = [a.format(d=made, t=tmp_path) for a in COMMANDS[name]] + (["--json"] if json_out else [])
    code, stderr = cli.run(args, stdout=stdout)
    assert "Traceback" not in stderr, stderr
    return code, stderr


def _ids(case):
    return f"{case[0]}{'-json' if case[1] else ''}"


@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_a_pipe_whose_reader_left_ends_quietly_with_141(cli, made, tmp_path, case):
    code, stderr = _run(cli, made, tmp_path, *case, stdout="gone-reader")  # gone before the first byte
    assert code == 141, stderr
    assert "error" not in stderr, stderr


@pytest.mark.parametrize("where", ["dev-full", "closed"])
@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_stdout_that_cannot_be_written_is_one_line_and_exit_2(cli, made, tmp_path, case, where):
    code, stderr = _run(cli, made, tmp_path, *case, stdout=where)  # `> /dev/full`, or `>&-`: fd 1 closed
    lines = [ln for ln in stderr.splitlines() if ln.startswith("error:")]
    assert code == 2, stderr
    assert len(lines) == 1 and lines[0].startswith("error: stdout cannot be written ("), stderr
    assert "result was not printed" in lines[0] and "re-run" in lines[0]
    if case[0] in WRITES:  # written before its summary: said, so it is not redone blindly
        done = WRITES[case[0]].format(t=tmp_path)
        assert f"{done} is complete and in place: re-run with --overwrite" in lines[0], lines[0]
        assert os.path.exists(done.split(" ", 2)[2])
    else:
        assert "complete and in place" not in lines[0], lines[0]
