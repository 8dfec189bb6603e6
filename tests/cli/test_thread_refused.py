"""A thread the system will not start (S47A-16's rest) is the run's limit, not a packtool bug:
under a memory limit too small for one more stack, Python's threading raised RuntimeError("can't
start new thread") (exit 3, "internal error (a packtool bug)") and the tokenizer's rayon pool
panicked (pyo3's PanicException, no Exception: a Python traceback, exit 1). Each is now kind
`resources`, exit 2, one line naming the command, the stage and input, the limit and the fix;
any other native panic is the one `internal` line, never a traceback. In-process over every
command (the failure raised where its work runs), and for real in a child under rlimits.
F10: numpy's OpenBLAS, its pool's thread refused while packtool loads, prints its own lines and
raise()s SIGINT on itself: the run said "interrupted (Ctrl-C) while packtool was starting" after
OpenBLAS's four lines. It is now the one `resources` line (cli.memory.blas_refused) after them;
a Ctrl-C landing there with threads to spare is still a Ctrl-C."""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

import pytest
from cli_main import raiser, run_main
from conftest import GPT2, GSM8K, ROOT, gsm8k_output

# what each failure is, as Python sees it: pyo3's PanicException is a BaseException of pyo3_runtime
PanicException = type("PanicException", (BaseException,), {"__module__": "pyo3_runtime"})
FAILURES = {
    "thread not started": (lambda: RuntimeError("can't start new thread"), "resources", 2),
    "tokenizer pool panic": (lambda: PanicException(
        "The global thread pool has not been initialized.: ThreadPoolBuildError { kind: IOError(Os { code: 11, "
        "kind: WouldBlock, message: \"Resource temporarily unavailable\" }) }"), "resources", 2),
    "other native panic": (lambda: PanicException("index out of bounds: the len is 3 but the index is 7"),
                           "internal", 3),
    # the library's own error for either (RB-8): the command says it with its place
    "packtool's ThreadRefused": (lambda: __import__("packtool.threads", fromlist=["refused"]).refused(
        RuntimeError("can't start new thread")), "resources", 2),
}


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    return gsm8k_output(tmp_path_factory.mktemp("threads"))


# command -> (argv, where its work is cut short, the stage's module, what the line names)
COMMANDS = {
    "pack": (lambda t: ["pack", GSM8K, "--tokenizer", GPT2, "--dry-run", "-q", "--cache-dir", str(t / "c2")],
             "packtool.packing.tokenize_to_cache", "packtool.tokenize.pipeline", ["while tokenizing", GSM8K]),
    "plan": (lambda t: ["plan", "--lengths", str(t / "l.txt")], "packtool.planning.core.plan",
             "packtool.planning.core", ["while planning", "l.txt"]),
    "inspect": (lambda t: ["inspect", str(t / "out"), "-q"], "packtool.inspection.packed.inspect_packed",
                "packtool.slabs.reader", ["out"]),
    "verify": (lambda t: ["verify", str(t / "out"), "-q"], "packtool.verification.run.verify",
               "packtool.verification.shard", ["while checking", "out"]),
}


@pytest.mark.parametrize("failure", FAILURES)
@pytest.mark.parametrize("command", COMMANDS)
def test_a_thread_refused_is_resources_in_one_line(packed, monkeypatch, capsys, command, failure):
    argv, site, module, said = COMMANDS[command]
    make, kind, code = FAILURES[failure]
    monkeypatch.setattr(site, raiser(module, make))
    ended = run_main(monkeypatch, ["--json", *argv(packed)])
    cap = capsys.readouterr()
    err = [ln for ln in cap.err.splitlines() if ln.startswith("error:")]
    assert ended == [code] and len(err) == 1 and "Traceback" not in cap.err, cap.err
    d = json.loads(cap.out)["error"]
    assert (d["kind"], d["exit_code"]) == (kind, code), d
    if kind == "resources":
        assert err[0].startswith(f"error: could not start a thread in `packtool {command}`"), err[0]
        assert all(s in err[0] for s in said) and "RAYON_NUM_THREADS" in err[0], err[0]
        assert "packtool bug" not in err[0], err[0]


def _limited(av_kib: int, stack_kib: int | None = None):
    def set_limits():
        if stack_kib:
            resource.setrlimit(resource.RLIMIT_STACK, (stack_kib << 10, stack_kib << 10))
        resource.setrlimit(resource.RLIMIT_AS, (av_kib << 10, av_kib << 10))
    return set_limits


# the real thing in a child: a stack limit past the address space leaves no thread room for its
# stack (threading's RuntimeError); a tokenizer pool of 3,000 threads of 2 MiB under 3 GB (rayon's panic)
REAL = {"thread not started": (_limited(6_000_000, 4_000_000), {}),
        "tokenizer pool panic": (_limited(3_000_000), {"RAYON_NUM_THREADS": "3000"})}


# RB-8: the library's door to the same refusal, in the same child: `packtool.pack` raised the tokenizer's
# PanicException (no Exception: a caller's `except Exception` missed it) and threading's RuntimeError
_LIBRARY = """
import json, sys
import packtool
from packtool.tokenize.config import TokenizeConfig
try:
    packtool.pack([{data!r}], tokenize=TokenizeConfig(tokenizer={tok!r}, prompt_field="question",
                  response_field="answer"), dry_run=True, cache_dir={cache!r})
except Exception as e:
    print(json.dumps({{"type": type(e).__name__, "kind": getattr(e, "kind", None), "message": str(e)}}))
except BaseException as e:
    print(json.dumps({{"type": type(e).__name__, "kind": "no Exception", "message": str(e)}}))
"""
DOORS = {"command": lambda t: ["-m", "packtool", "--json", "pack", GSM8K, "--tokenizer", GPT2, "--prompt-field",
                               "question", "--response-field", "answer", "--dry-run", "--no-progress", "--cache-dir",
                               str(t / "c")],
         "library": lambda t: ["-c", _LIBRARY.format(data=GSM8K, tok=GPT2, cache=str(t / "c"))]}


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("failure", REAL)
def test_a_thread_refused_under_a_real_limit_is_resources(tmp_path, failure, door):
    limits, env = REAL[failure]
    env = {**os.environ, **env, "PYTHONPATH": ROOT, "OPENBLAS_NUM_THREADS": "1", "RUST_BACKTRACE": "0"}
    env.pop("PACKTOOL_DEBUG", None)
    r = subprocess.run([sys.executable, *DOORS[door](tmp_path)], env=env, preexec_fn=limits, capture_output=True,
                       text=True, timeout=300, cwd=tmp_path)
    said = [ln for ln in r.stderr.splitlines() if ln.strip()]
    if door == "command":  # packtool's one line only: rust's own "thread ... panicked" lines are not printed
        assert r.returncode == 2 and len(said) == 1 and said[0].startswith("error: "), (r.returncode, r.stderr[-3000:])
        d = json.loads(r.stdout)["error"]
        assert d["message"].startswith("could not start a thread in `packtool pack`"), d
    else:  # packtool's own error, an Exception, with the command's words less its place
        assert r.returncode == 0 and not said, (r.returncode, r.stderr[-3000:])
        d = json.loads(r.stdout)
        assert d["type"] == "ThreadRefused" and d["message"].startswith("could not start a thread ("), d
    assert d["kind"] == "resources" and "ulimit -v" in d["message"], d
    if failure == "tokenizer pool panic":
        assert "RAYON_NUM_THREADS=1" in d["message"], d


def test_openblas_refused_at_start_is_resources_in_one_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": ROOT, "OPENBLAS_NUM_THREADS": "4", "RUST_BACKTRACE": "0"}
    env.pop("PACKTOOL_DEBUG", None)
    r = subprocess.run([sys.executable, "-m", "packtool", "--json", "pack", GSM8K, "--tokenizer", GPT2,
                        "--prompt-field", "question", "--response-field", "answer", "--dry-run", "--no-progress",
                        "--cache-dir", str(tmp_path / "c")], env=env, preexec_fn=_limited(6_000_000, 4_000_000),
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    lines = r.stderr.splitlines()
    errors = [ln for ln in lines if ln.startswith("error: ")]
    assert r.returncode == 2 and len(errors) == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
    d = json.loads(r.stdout)["error"]
    if "OpenBLAS" not in d["message"]:  # its pool started under the limit this time (once in a full-suite run, never
        # alone): the refusal came from the tokenizer's pool later, which must be the same one resources line
        assert d["kind"] == "resources" and "could not start a thread" in d["message"], d
        pytest.skip("numpy's OpenBLAS started its threads under this limit in this run: nothing of its to say")
    # packtool's line alone: OpenBLAS's own four lines are this refusal (F3)
    assert lines == errors, r.stderr[-3000:]
    assert d["kind"] == "resources" and "OPENBLAS_NUM_THREADS=1" in d["message"], d
    assert "ulimit -v" in d["message"] and "Ctrl-C" not in d["message"], d


def _interrupted_in(module: str) -> KeyboardInterrupt:
    ns = {"__name__": module}
    exec("def boom():\n    raise KeyboardInterrupt()\n", ns)
    try:
        ns["boom"]()
    except KeyboardInterrupt as e:
        return e


@pytest.mark.parametrize("module, refused, said", [("numpy._core.multiarray", True, True),
                                                   ("numpy._core.multiarray", False, False),
                                                   ("packtool.cli.app", True, False)])
def test_only_a_refused_pool_in_numpys_import_is_openblas(monkeypatch, module, refused, said):
    import threading

    from packtool.cli.memory import blas_refused
    if refused:
        def start(self):
            raise RuntimeError("can't start new thread")
        monkeypatch.setattr(threading.Thread, "start", start)
    assert blas_refused(_interrupted_in(module)) is said
