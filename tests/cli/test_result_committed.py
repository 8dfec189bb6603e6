"""Ctrl-C after a command's result is printed (stranger trial, end of stop 27): the ~0.3-0.5 s
from `Done:` to the process's end (atexit handlers, the interpreter's teardown) exited 130 with
no `error:` line while the output was complete and `--json` had said success. Once a result is
printed it is the outcome: every subcommand that prints one exits with its own status.

One child process runs every subcommand in-process (the CLI as a library caller runs it), each
followed by SIGINT to the whole process group, as a terminal's Ctrl-C is sent; then the console
script itself, with SIGINT again from the last atexit handler (the teardown)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from packtool.cli.app import app

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHILD = r"""
import atexit, functools, json, os, signal, sys, time, types
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # as a terminal's process
signal.signal(signal.SIGINT, signal.default_int_handler)
runs, log = json.loads(os.environ["RUNS"]), open(os.environ["CODES"], "w")

def ctrl_c():  # what the terminal does: the whole foreground group, then a moment to land
    os.killpg(0, signal.SIGINT)
    time.sleep(0.05)

# train's own loop is torch's (seconds to import); its result lines end it, as here
loop = types.ModuleType("packtool.megatron.loop")
loop.TrainConfig = lambda **kw: kw
loop.train = lambda cfg: print("step      0 loss   4.8540  (stub)")
model = types.ModuleType("packtool.megatron.model")
model.GPTShape = lambda **kw: kw
model.padded_vocab = lambda v, tp: v
sys.modules.update({"packtool.megatron.loop": loop, "packtool.megatron.model": model})

from packtool.cli.app import app
for c in app.registered_commands:
    def after(f):
        @functools.wraps(f)
        def run(*a, **k):
            try:
                return f(*a, **k)
            finally:  # the command printed its result (verify ends by raising its status)
                ctrl_c()
        return run
    c.callback = after(c.callback)

import typer
cli = typer.main.get_command(app)
for args in runs[:-1]:
    code = cli.main(args, prog_name="packtool", standalone_mode=False)
    handler = signal.getsignal(signal.SIGINT)
    log.write(json.dumps({"args": args, "code": code, "restored": handler is signal.default_int_handler}) + "\n")
    log.flush()
atexit.register(ctrl_c)  # registered first, so it runs last: inside the teardown
sys.argv = ["packtool", *runs[-1]]
from packtool.cli import main
main()
"""


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    d = tmp_path_factory.mktemp("committed")
    rng = np.random.default_rng(0)
    src = str(d / "rows.parquet")
    pq.write_table(pa.table({"input_ids": [rng.integers(1, 100, int(n)).tolist()
                                           for n in rng.integers(5, 60, 40)]}), src)
    lengths = str(d / "lengths.txt")
    open(lengths, "w").write("10\n20\n300\n")
    out, out2, cache = str(d / "out"), str(d / "out2"), str(d / "cache")
    runs = [["plan", "--lengths", lengths, "-C", "512", "--json"],
            ["inspect", "--lengths", lengths, "-C", "512", "--no-what-if"],
            ["pack", src, "-C", "64", "-o", out, "--cache-dir", cache, "-q"],
            ["verify", out, "--source", src, "--cache-dir", cache, "-q", "--workers", "2"],
            ["inspect", out, "--json", "--no-what-if"],
            ["train", out, "--vocab-size", "128", "--steps", "1", "--device", "cpu"],
            ["pack", src, "-C", "64", "-o", out2, "--cache-dir", cache, "--json"]]
    codes = d / "codes.jsonl"
    env = dict(os.environ, PYTHONPATH=ROOT, RUNS=json.dumps(runs), CODES=str(codes))
    env.pop("PACKTOOL_DEBUG", None)
    r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                       start_new_session=True, timeout=300, cwd=str(d))
    return d, runs, [json.loads(x) for x in codes.read_text().splitlines()], r


def test_every_result_printing_command_is_covered(ran):
    _, runs, _, _ = ran
    assert {c.name or c.callback.__name__ for c in app.registered_commands} == {a[0] for a in runs}


def test_in_process_runs_keep_their_status_and_give_ctrl_c_back(ran):
    _, runs, codes, r = ran
    assert [c["args"] for c in codes] == runs[:-1], r.stderr
    assert [c["code"] for c in codes] == [0] * len(codes), r.stderr
    assert all(c["restored"] for c in codes)  # a library caller gets its Ctrl-C back


def test_console_script_exits_0_after_done(ran):
    d, runs, _, r = ran
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and "error" not in r.stderr.lower(), r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1])["slabs"] > 0  # --json said success
    for out in ("out", "out2"):  # complete outputs; nothing else left beside or in them
        names = sorted(os.listdir(d / out))
        assert names == [".manifest.json", "slabs-00000.parquet"], names
    assert sorted(p for p in os.listdir(d) if not p.startswith(("cache", "codes"))) == \
        ["lengths.txt", "out", "out2", "rows.parquet"]
