"""Issue 23 class 4: no tracebacks and no untrue lines at the edges of a run: a background
thread's crash (the numba warm-up), Ctrl-C in every phase, usage errors. Each case checks the
exit status, one `error:` line (or none on success) and that no traceback shows."""
from __future__ import annotations

import functools
import importlib
import json
import os
import signal
import subprocess
import sys

import pytest
from _signal_child import STAGES, WORDS, held_run, one_line, started_stops
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


@pytest.fixture(scope="module")
def gsm8k_cache(tmp_path_factory):
    """GSM8K tokenized once (in this process) for the module's runs: a warm cache."""
    import packtool
    root = tmp_path_factory.mktemp("gsm8k")
    cache = str(root / "cache")
    packtool.pack([GSM8K], packtool.Alignment(capacity=2048), output=str(root / "out"), cache_dir=cache,
                  tokenize=packtool.TokenizeConfig(tokenizer=GPT2, prompt_field="question", response_field="answer"))
    return cache


class TestWarmThread:
    """The numba warm-up thread may hold numba's compiler lock when packtool's compile watch
    is registered: the watch then sees an end without a start (it raised AttributeError on
    the warm thread, a 71-line traceback on a successful run, with the cache warm)."""

    def test_an_end_without_a_start_is_ignored(self):
        s = _Span()
        s.end()
        assert s.start()
        s.end()
        assert s.seconds() >= 0.0

    @pytest.mark.parametrize("mode", ["--json", "--no-progress", "library"])
    def test_warm_cache_runs_print_no_traceback(self, tmp_path, gsm8k_cache, mode):
        out = str(tmp_path / "out")
        if mode == "library":
            code = ("import packtool\nfrom packtool import TokenizeConfig, Alignment\n"
                    f"t = TokenizeConfig(tokenizer={GPT2!r}, prompt_field='question', response_field='answer')\n"
                    f"packtool.pack([{GSM8K!r}], Alignment(capacity=2048), tokenize=t, output={out!r}, "
                    f"cache_dir={gsm8k_cache!r})\n")
            r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               env=dict(os.environ, PYTHONPATH=ROOT))
        else:
            r = run_cli(["pack", GSM8K, *GSM8K_FLAGS, "--cache-dir", gsm8k_cache, "-o", out, mode])
        assert r.returncode == 0, r.stderr
        no_traceback(r.stdout + r.stderr)
        assert "error" not in r.stderr


# --- Ctrl-C in every phase ------------------------------------------------------------------

def _tree(d) -> dict[str, bytes]:
    return {f: open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d))}


@pytest.fixture(scope="module")
def previous(tmp_path_factory, gsm8k_cache):
    import packtool
    out = tmp_path_factory.mktemp("ctrlc") / "out"
    packtool.pack([GSM8K], packtool.Alignment(capacity=2048), output=str(out), cache_dir=gsm8k_cache,
                  tokenize=packtool.TokenizeConfig(tokenizer=GPT2, prompt_field="question", response_field="answer"))
    return out


def _lines(err: str, sig) -> list[str]:
    no_traceback(err)
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and WORDS[sig] in lines[0], err
    return lines


SIGS = [pytest.param(signal.SIGINT, id="SIGINT"), pytest.param(signal.SIGTERM, id="SIGTERM")]


@pytest.fixture
def in_process(monkeypatch, request, capsys):
    """main() run in this process, stopped by a real signal where a stage holds: its `_leave`
    (os._exit) records the status instead, and the signal handlers, the CLI's state and the
    SIGTERM record are put back after."""
    import packtool.cli as cli
    import packtool.cli.failure as failure
    left: list[int] = []

    def leave(code):
        left.append(code)
        raise SystemExit(code)
    monkeypatch.setattr(cli, "_leave", leave)
    monkeypatch.setattr(cli, "_TERMINATED", [])
    monkeypatch.setattr(failure, "_STATE", {})
    for s in (signal.SIGINT, signal.SIGTERM):
        request.addfinalizer(functools.partial(signal.signal, s, signal.getsignal(s)))
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # as a terminal's process
    request.addfinalizer(lambda: signal.pthread_sigmask(signal.SIG_SETMASK, mask))
    signal.signal(signal.SIGINT, signal.default_int_handler)

    def run(args: list, stage: str, sig) -> tuple[int, str, str]:
        module, path, before = STAGES[stage]
        owner = importlib.import_module(module)
        *outer, name = path.split(".")
        for part in outer:
            owner = getattr(owner, part)
        monkeypatch.setattr(owner, name, lambda *a, **k: signal.raise_signal(sig))
        monkeypatch.setattr(sys, "argv", ["packtool", *args])
        with pytest.raises(SystemExit) as e:
            cli.main()
        got = capsys.readouterr()
        assert left == [e.value.code], left  # it left as the console script leaves
        return e.value.code, got.out, got.err
    return run


class TestCtrlC:
    """SIGINT or SIGTERM in each phase: exit 130 or 143, one `error:` line that tells the truth
    about the output (left as it was before the swap; named as the new one after it), no traceback.
    The phases before the command reads anything run in this process; the rest in their own."""

    @pytest.mark.parametrize("sig", SIGS)
    @pytest.mark.parametrize("stage,json_out", [("tokenize", False), ("write", True), ("after the swap", False),
                                                ("after the swap", True)])
    def test_one_true_line(self, previous, gsm8k_cache, tmp_path, stage, json_out, sig):
        out = previous
        before = _tree(out)
        # a fresh --cache-dir where the stop comes before tokenizing: the folder it created goes
        cache = str(tmp_path / "cache") if stage == "tokenize" else gsm8k_cache
        args = ["pack", GSM8K, *GSM8K_FLAGS, "--cache-dir", cache, "-o", str(out),
                "--overwrite", "--no-progress", "--seed", "7", *(["--json"] if json_out else [])]
        end = held_run(args, stage, tmp_path, sig)
        line = one_line(end, sig)
        assert "terminated (SIGTERM): " not in end.err.replace(line, "")  # the library's own note: not twice
        if stage == "after the swap":
            assert "as it was" not in line and str(out) in line, line
            manifest = json.loads(_tree(out)[".manifest.json"])
            assert manifest["config"]["packing"]["seed"] == 7  # the new output is in place
        else:
            assert "as it was" in line, line
            assert _tree(out) == before
        if json_out:
            assert json.loads(end.out.strip().splitlines()[-1])["error"]["exit_code"] == 128 + sig
        assert not [p for p in os.listdir(out.parent) if "packtool-tmp" in p or "packtool-spill" in p]
        assert stage != "tokenize" or not os.path.exists(cache)

    @pytest.mark.parametrize("sig", SIGS)
    @pytest.mark.parametrize("command", ["pack", "plan", "inspect"])
    @pytest.mark.parametrize("stage", ["start-up", "flags"])
    def test_while_starting(self, in_process, tmp_path, command, stage, sig):
        """Stopped while the command line starts (its modules loaded, flags not read or being
        read): the one line, nothing read or written."""
        lengths = tmp_path / "lengths.txt"
        lengths.write_text("10\n20\n300\n")
        args = {"pack": ["pack", GSM8K, *GSM8K_FLAGS, "-o", str(tmp_path / "out")],
                "plan": ["plan", "--lengths", str(lengths), "-C", "512"],
                "inspect": ["inspect", "--lengths", str(lengths), "-C", "512"]}[command]
        code, out, err = in_process([*args, "--json"], stage, sig)
        assert code == 128 + sig
        _lines(err, sig)
        assert json.loads(out.strip().splitlines()[-1])["error"]["exit_code"] == 128 + sig
        assert not os.path.exists(tmp_path / "out")

    @pytest.mark.parametrize("entry", [["-m", "packtool"], ["-m", "packtool.cli"], "console script"],
                             ids=["-m packtool", "-m packtool.cli", "console script"])
    def test_from_packtools_first_line(self, tmp_path, entry):
        """Ctrl-C or SIGTERM at each line packtool runs before main's handling takes over (its
        package's __init__, the CLI's, main's first lines): packtool/__init__.py holds both
        from its first lines, main lets them land. A traceback (2 of 60 runs Ctrl-C'd 0.25 s
        after launch) or a silent SIGTERM death before. What precedes packtool's first line,
        the interpreter's start-up, is out of reach."""
        if entry == "console script":  # as pip writes it: __main__ is a file named `packtool`
            script = tmp_path / "bin" / "packtool"
            script.parent.mkdir()
            script.write_text("import sys\nfrom packtool.cli import main\nif __name__ == '__main__':\n"
                              "    sys.exit(main())\n")
            entry = [str(script)]
        stops = started_stops(entry, ["plan", "--lengths", "x.txt", "--json"], tmp_path)
        where = {w for w, *_ in stops}
        assert {w.split(":")[0] for w in where} >= {"packtool/__init__.py", "packtool/cli/__init__.py"}, where
        for w, sig, code, out, err in stops:
            assert code == 128 + sig, (w, sig.name, code, err)
            assert "while packtool was starting" in _lines(err, sig)[0], (w, err)
            assert json.loads(out)["error"]["exit_code"] == 128 + sig, (w, out)

    def test_while_the_cli_modules_load(self, monkeypatch, capsys):
        """The console script's own import of the command line, interrupted: it leaves as every
        Ctrl-C'd run does (`_leave`, no interpreter teardown). With sys.exit(130) the teardown
        ended 4 of 60 `python -m packtool verify` runs interrupted 0.17-0.35 s after launch by
        SIGINT (exit -2) after the error line; 0 of 60 with `_leave`."""
        import packtool.cli as cli

        left = []

        def leave(code):
            left.append(code)
            raise SystemExit(code)
        monkeypatch.setattr(cli, "_leave", leave)

        class Interrupting:
            def find_spec(self, name, *a):
                if name == "packtool.cli.app":
                    raise KeyboardInterrupt
                return None
        monkeypatch.delitem(sys.modules, "packtool.cli.app", raising=False)
        monkeypatch.setattr(sys, "meta_path", [Interrupting(), *sys.meta_path])
        monkeypatch.setattr(sys, "argv", ["packtool", "pack", "x", "--json"])
        with pytest.raises(SystemExit) as e:
            cli.main()
        got = capsys.readouterr()
        assert e.value.code == 130 and left == [130]
        assert [ln for ln in got.err.splitlines() if ln.startswith("error:")] == [got.err.strip()]
        assert json.loads(got.out)["error"]["exit_code"] == 130
