"""Issue 23 class 4: Ctrl-C while packtool's workers run (S28-13, S28-1). Every subcommand that
starts worker processes or threads (verify's process pool, verify --source's tokenizer and
writers, pack's encode threads, cache writers, shard writers and the `packtool-warm` thread,
the Ray engine) is held where its workers are alive; then SIGINT goes to the whole process
group, as a terminal sends it. The run must end with exit 130, one `error:` line, no traceback
from any process, and no process of its group left behind. (inspect and plan start no workers.)

A process pool left running hung the exit forever: multiprocessing's atexit handler joined its
idle workers. A worker (or the forkserver) that took the terminal's SIGINT while it started
printed its own traceback."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import GPT2, GSM8K, PEPS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOK = ["--prompt-field", "question", "--response-field", "answer", "--tokenizer", GPT2]
HANG = 90  # seconds: a run still alive then is hung (the bug: forever)

CHILD = r"""
import os, signal, sys, time
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # as a terminal's process
signal.signal(signal.SIGINT, signal.default_int_handler)
stage, marker = os.environ["HOLD_STAGE"], os.environ["HOLD_MARKER"]
hold_s = float(os.environ["HOLD_SECONDS"])
def hold():
    if not os.path.exists(marker):
        open(marker, "w").close()
        time.sleep(hold_s)
def wrap(obj, name, before=True):
    orig = getattr(obj, name)
    def f(*a, **k):
        if before:
            hold()
        r = orig(*a, **k)
        if not before:
            hold()
        return r
    setattr(obj, name, f)
if stage == "pool results":  # the parent between two results: the workers busy or idle
    import packtool.verification.run as m
    wrap(m, "_done")
elif stage == "worker launch":  # the forkserver and the first worker starting: marked as the
    import multiprocessing.popen_forkserver as m  # launch begins, held once it is under way, so
    launch = m.Popen._launch                      # that the run cannot end before the signal
    def held_launch(*a, **k):
        first = not os.path.exists(marker)
        open(marker, "a").close()
        r = launch(*a, **k)
        if first:
            time.sleep(hold_s)
        return r
    m.Popen._launch = held_launch
elif stage == "tokenize":  # encode threads, the cache's writer threads, packtool-warm
    import packtool.tokenize.sink as m
    wrap(m.CacheSink, "add", before=False)
elif stage == "warm thread":  # numba's compiler warming up on its thread
    import packtool.tokenize.prefetch as m, packtool.tokenize.pipeline as p
    wrap(m, "warm_compiled_code", before=False)
    p.warm_compiled_code = m.warm_compiled_code
elif stage == "shard writers":  # shards being written by their threads
    import packtool.slabs.writer as m
    wrap(m, "wait")
elif stage == "ray":
    import packtool.engines.ray_engine as m
    wrap(m, "init_ray", before=False)
sys.argv = ["packtool", *sys.argv[1:]]
from packtool.cli import main
main()
"""


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """An output of several shards, so that verify cuts it into pieces for its pool."""
    d = tmp_path_factory.mktemp("interrupt")
    out = str(d / "out")
    r = _cli(["pack", GSM8K, *TOK, "-C", "1024", "--shard-tokens", "4096", "-o", out,
              "--cache-dir", str(d / "cache"), "-q"])
    assert r.returncode == 0, r.stderr
    assert len([f for f in os.listdir(out) if f.endswith(".parquet")]) > 4
    return d, out


def _cli(args):
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("PACKTOOL_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "packtool", *args], capture_output=True, text=True, env=env)


def interrupt(args, stage, tmp_path, delay=0.0, hold_s=60.0, sig=signal.SIGINT):
    """Run the CLI held at `stage`; SIGINT its process group `delay` s after the hold begins
    (as a terminal does), or SIGTERM its leader (as Kubernetes and `kill` do).
    Returns (exit status, stdout, stderr, pids of the group still alive)."""
    marker = tmp_path / f"held-{time.monotonic_ns()}"
    env = dict(os.environ, PYTHONPATH=ROOT, HOLD_STAGE=stage, HOLD_MARKER=str(marker),
               HOLD_SECONDS=str(hold_s))
    env.pop("PACKTOOL_DEBUG", None)
    child = subprocess.Popen([sys.executable, "-c", CHILD, *args], env=env, text=True, cwd=str(tmp_path),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        while not marker.exists():
            assert child.poll() is None, child.communicate()
            time.sleep(0.005)
        time.sleep(delay)
        if sig == signal.SIGINT:
            os.killpg(child.pid, sig)
        else:
            os.kill(child.pid, sig)
        try:
            out, err = child.communicate(timeout=HANG)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{args[0]} hung after Ctrl-C at {stage!r}")
        return child.returncode, out, err, _left(child.pid)
    finally:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _left(pgid: int) -> list[str]:
    """The group's processes still alive a while after its leader ended (the forkserver and
    the resource tracker end when they see the leader's pipes close)."""
    for _ in range(100):
        r = subprocess.run(["pgrep", "-a", "-g", str(pgid)], capture_output=True, text=True)
        if not r.stdout.strip():
            return []
        time.sleep(0.1)
    return r.stdout.splitlines()


def one_interrupted_line(code, out, err, left, sig=signal.SIGINT) -> str:
    assert "Traceback" not in err and "Exception in thread" not in err, err
    assert "leaked" not in err, err  # multiprocessing's resource tracker: a pool not stopped
    assert code == 128 + sig, err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    words = "interrupted (Ctrl-C)" if sig == signal.SIGINT else "terminated (SIGTERM)"
    assert len(lines) == 1 and words in lines[0], err
    assert left == [], left
    return lines[0]


def _verify(packed, tmp_path, *extra):
    return ["verify", packed[1], "--workers", "2", "-q", *extra]


def _verify_source(packed, tmp_path):
    return _verify(packed, tmp_path, "--source", GSM8K, "--cache-dir", str(tmp_path / "vcache"))


def _pack(packed, tmp_path, *extra):
    return ["pack", PEPS, "--tokenizer", GPT2, "-C", "1024",
            "--overflow", "split", "--shard-tokens", "4096", "-o", str(tmp_path / "out"),
            "--cache-dir", str(tmp_path / "cache"), "-q", *extra]


CASES = {  # what starts workers -> (its command line, where it is held)
    "verify's pool": (_verify, "pool results"),
    "verify --source, tokenizing": (_verify_source, "tokenize"),
    "verify --source's pool": (_verify_source, "pool results"),
    "pack tokenizing": (_pack, "tokenize"),
    "pack's packtool-warm thread": (_pack, "warm thread"),
    "pack's shard writers": (_pack, "shard writers"),
}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("delay", [0.0, 0.4])
@pytest.mark.parametrize("case", list(CASES))
def test_ctrl_c_while_workers_run(packed, tmp_path, case, delay, sig):
    args, stage = CASES[case]
    line = one_interrupted_line(*interrupt(args(packed, tmp_path), stage, tmp_path, delay, sig=sig), sig)
    assert not os.path.exists(tmp_path / "out")  # pack: nothing half-written left
    if "--source" in case:  # S28-2: the line speaks of a --source copy only when there is one
        assert "temporary copy of the tokenized --source" in line and "is removed" in line, line
        assert not os.path.exists(tmp_path / "vcache"), os.listdir(tmp_path / "vcache")
    elif "verify" in case:
        assert "--source" not in line and "nothing was written;" in line, line


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("delay", [i * 0.03 for i in range(20)])
def test_ctrl_c_while_verify_workers_start(packed, tmp_path, delay, sig):
    """S28-1: SIGINT to the group from the first worker's launch on (the forkserver execs and
    imports `site`, forks the workers): only the parent takes it. SIGTERM to the parent alike."""
    one_interrupted_line(*interrupt(_verify(packed, tmp_path), "worker launch", tmp_path, delay, hold_s=3, sig=sig), sig)


def test_ctrl_c_with_the_ray_engine(packed, tmp_path):
    pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'packtool[ray]')")
    args = [*_pack(packed, tmp_path), "--engine", "ray"]
    one_interrupted_line(*interrupt(args, "ray", tmp_path, 0.2))
