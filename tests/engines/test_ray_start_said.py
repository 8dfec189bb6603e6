"""Ray's start-up output under `pack --engine ray -q` and `--json` (stop 38's "Left" 2, S38-8 as a
rule): S38-8 dropped Ray's token-auth advisory alone; its other start-up warnings (the object
store put in /tmp when /dev/shm is small: "WARNING: The object store is using /tmp/ray instead of
/dev/shm ...", or any other a Ray logger says while ray.init runs) still went to stderr through
Python's last-resort handler, where -q and --json keep packtool's lines only. Now every warning
Ray logs while packtool starts or joins it is held and said by packtool: what a user can act on
in packtool's words (the object store), any other quoting Ray, as notes (in --json's too); the
advisory not at all."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'packtool[ray]')")

from conftest import GPT2, GSM8K, LOCAL_RAY_GROUP, ROOT  # noqa: E402

import packtool.engines.ray_join as ray_join  # noqa: E402
from packtool.engines.ray_engine import init_ray  # noqa: E402
from packtool.notes import mark, since  # noqa: E402

SHM = ("WARNING: The object store is using /tmp/ray instead of /dev/shm because /dev/shm has only 1048576 bytes "
       "available. This will harm performance! You may be able to free up space by deleting files in /dev/shm.")
# what Ray logs while ray.init runs (logger, text) -> what packtool says of it (None: nothing)
SAID = {
    "object store off /dev/shm": (("ray._private.services", SHM),
                                  "Ray's object store is in /tmp/ray, not /dev/shm (only 1 MiB free there)"),
    "another warning": (("ray._private.worker", "Some other start-up warning %s"),
                        "Ray said while starting: Some other start-up warning 7"),
    "the auth advisory": (("ray._private.authentication.authentication_token_setup",
                           "Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled"), None),
}


class _Reached(BaseException):
    pass


@pytest.mark.parametrize("case", SAID)
def test_what_ray_logs_at_start_is_said_by_packtool(monkeypatch, capsys, case):
    (logger, text), want = SAID[case]

    def init(*a, **k):
        monkeypatch.setattr(logging.getLogger("ray"), "handlers", [])  # ray.init's, with configure_logging=False
        logging.getLogger(logger).warning(text, *((7,) if "%s" in text else ()))
        raise _Reached()
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray_join, "check_answers", lambda address: None)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    at = mark()
    before = logging.lastResort
    with pytest.raises(_Reached):
        init_ray(None)
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert all(line.startswith("packtool: ") for line in lines), err  # nothing of Ray's own
    if want is None:
        assert not since(at) and not lines, err
    else:
        assert len(since(at)) == 1 and since(at)[0].startswith(want), since(at)
    assert logging.lastResort is before  # only while ray.init runs


# a real local Ray started by the CLI, its /dev/shm made small (Ray's own question of it)
RUN = """import sys
import ray._private.utils as u
u.get_shared_memory_bytes = lambda: 1 << 20
from packtool.cli.app import main
sys.argv = ["packtool", *sys.argv[1:]]
main()
"""


@LOCAL_RAY_GROUP  # the subprocess starts a local Ray node
@pytest.mark.parametrize("quiet", ["-q", "--json"])
def test_a_quiet_ray_run_leaves_packtools_lines_only_on_stderr(tmp_path, quiet):
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "RAY_ADDRESS")}
    env["PYTHONPATH"] = ROOT
    r = subprocess.run([sys.executable, "-c", RUN, "pack", GSM8K, "--tokenizer", GPT2, "--shape", "fields",
                        "--prompt-field", "question", "--response-field", "answer", "-C", "1024", "--dry-run",
                        "--cache-dir", str(tmp_path / "c"), "--engine", "ray", quiet],
                       env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert lines and all(line.startswith("packtool: ") for line in lines), r.stderr
    assert any("not /dev/shm" in line and "--shm-size" in line for line in lines), r.stderr
    assert "Token authentication" not in r.stderr
    if quiet == "--json":
        assert any("not /dev/shm" in n for n in json.loads(r.stdout)["notes"])
