"""The first-run compile note and the planning time (stranger-test R5, R15): the note is said
only when a kernel the run uses is really compiled (numba's cache miss), never on a run whose
kernels load from the cache; a plan's `seconds` leave the compile out and report it apart."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
from conftest import GPT2, GSM8K, ROOT
from numba import njit
from rich.console import Console

import packtool.progress as progress
from packtool.align import Alignment
from packtool.cli.printing import print_plan_summary
from packtool.planning.core import PackingConfig, plan_with
from packtool.planning.summary import plan_summary

NOTE = "compiling the packing kernels"


def _fresh_kernel():
    """A packtool-module kernel that is not compiled yet (no cache: each call site is new)."""
    def first_fit(fp):
        out = np.empty(fp.size, np.int64)
        for i in range(fp.size):
            out[i] = i
        return out
    first_fit.__module__ = "packtool._test_kernel"
    return njit(first_fit)


def test_note_only_on_a_real_compile(capsys, monkeypatch):
    monkeypatch.setattr(progress, "_said", set())
    monkeypatch.setattr(progress._watching(), "announce", False)
    k = _fresh_kernel()
    progress.say_if_compiling(True)
    k(np.ones(3, np.int64))
    assert NOTE in capsys.readouterr().err
    k(np.ones(3, np.int64))  # compiled: nothing more to say
    _fresh_kernel()(np.ones(3, np.int64))  # and said once per process at most
    assert NOTE not in capsys.readouterr().err


def test_no_note_when_nothing_compiles(capsys, monkeypatch):
    monkeypatch.setattr(progress, "_said", set())
    monkeypatch.setattr(progress._watching(), "announce", False)
    k = _fresh_kernel()
    k(np.ones(3, np.int64))
    progress.say_if_compiling(True)
    k(np.ones(3, np.int64))
    assert NOTE not in capsys.readouterr().err


def test_plan_seconds_leave_the_compile_out_without_double_counting():
    a = Alignment(capacity=64)
    k = _fresh_kernel()
    t0 = time.perf_counter()
    p = plan_with(np.full(10, 8), a, PackingConfig(), lambda fp: k(fp))
    wall = time.perf_counter() - t0
    assert p.compile_seconds > 0 and p.load_seconds >= 0
    assert p.seconds + p.compile_seconds + p.load_seconds <= wall  # each second counted once
    s = plan_summary(p)
    assert (s.plan_seconds, s.compile_seconds, s.load_seconds) == (p.seconds, p.compile_seconds, p.load_seconds)
    con = Console(record=True, width=200)
    print_plan_summary(s, con)
    row = [ln for ln in con.export_text().splitlines() if "planning" in ln][0]
    assert f"{s.plan_seconds:.3f} s" in row and "kernel compile" in row and "not included" in row
    again = plan_with(np.full(10, 8), a, PackingConfig(), lambda fp: k(fp))
    assert again.compile_seconds == 0  # compiled once: the second plan has none to report


def test_the_note_names_compile_and_load_apart():
    from packtool.cli.printing import plan_compile_note
    assert plan_compile_note(0.0, 0.0) == ""
    assert plan_compile_note(2.0, 0.0) == "+2.00 s kernel compile, not included"
    assert plan_compile_note(0.0, 0.64) == "+0.64 s kernel load, not included"
    assert plan_compile_note(1.5, 0.25) == "+1.50 s kernel compile, +0.25 s kernel load, not included"


def test_a_second_identical_pack_says_no_compile_note(tmp_path):
    """Fresh processes with their own numba cache: the first run compiles what it uses (a
    bfd run: not mffd/balanced/dp), the second loads it and says nothing."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    args = [sys.executable, "-m", "packtool", "pack", GSM8K, "--tokenizer", GPT2, "-C", "1024",
            "--prompt-field", "question", "--response-field", "answer",
            "-o", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache"), "--overwrite"]
    runs = [subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True) for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr + runs[1].stderr
    assert NOTE in runs[0].stderr
    assert NOTE not in runs[1].stderr, runs[1].stderr
