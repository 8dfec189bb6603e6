"""Issue 23 class 4: no tracebacks and no untrue lines at the edges of a run: a background
thread's crash (the numba warm-up), Ctrl-C in every phase, usage errors. Each case checks the
exit status, one `error:` line (or none on success) and that no traceback shows."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import GSM8K, GPT2

from packtool.progress import _Span

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GSM8K_FLAGS = ["--prompt-field", "question", "--response-field", "answer", "--tokenizer", GPT2, "-C", "2048"]


def run_cli(args, cwd=None, **kw):
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("PACKTOOL_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "packtool", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, **kw)


def no_traceback(text: str) -> None:
    assert "Traceback" not in text and "Exception in thread" not in text, text


class TestWarmThread:
    """The numba warm-up thread may hold numba's compiler lock when packtool's compile watch
    is registered: the watch then sees an end without a start (it raised AttributeError on
    the warm thread, a 71-line traceback on a successful run)."""

    def test_an_end_without_a_start_is_ignored(self):
        s = _Span()
        s.end()
        assert s.start()
        s.end()
        assert s.seconds() >= 0.0

    @pytest.mark.parametrize("mode", ["--json", "--no-progress", "library"])
    def test_warm_cache_runs_print_no_traceback(self, tmp_path, mode):
        cache = str(tmp_path / "cache")
        for i in range(2):  # the second run finds the cache warm
            out = str(tmp_path / f"out{i}")
            if mode == "library":
                code = ("import packtool\nfrom packtool import TokenizeConfig, Alignment\n"
                        f"t = TokenizeConfig(tokenizer={GPT2!r}, prompt_field='question', response_field='answer')\n"
                        f"packtool.pack([{GSM8K!r}], Alignment(capacity=2048), tokenize=t, output={out!r}, "
                        f"cache_dir={cache!r})\n")
                r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                   env=dict(os.environ, PYTHONPATH=ROOT))
            else:
                r = run_cli(["pack", GSM8K, *GSM8K_FLAGS, "--cache-dir", cache, "-o", out, mode])
            assert r.returncode == 0, r.stderr
            no_traceback(r.stdout + r.stderr)
            assert "error" not in r.stderr
