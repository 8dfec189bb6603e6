"""Ray not coming up is the run's setting, not a packtool bug (issue 23, S36-6): a local node
that cannot start (a file-size limit: "The current node timed out during startup"), a cluster
address that does not answer or runs another Ray. Each is one line naming --engine ray or
--ray-address, Ray's reason and the fix, kind config, exit 2 (it was "internal error (a
packtool bug)", exit 3). Ray's start is stood in for: the failure is what ray.init raises."""
from __future__ import annotations

import json

import pytest

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'packtool[ray]')")

from cli_main import run_main  # noqa: E402
from conftest import GPT2, GSM8K  # noqa: E402

import packtool.engines.ray_join as ray_join  # noqa: E402
from packtool.errors import PacktoolConfigError  # noqa: E402

# what ray.init raises when it cannot come up (Ray 2.60's own types and words)
FAILURES = {
    "node-timed-out": Exception("The current node timed out during startup. This could happen because some of "
                                "the raylet failed to startup or the GCS has become overloaded."),
    "gcs-unreachable": ConnectionError("Could not find any running Ray instance. Please specify the one to connect to"),
    "version-mismatch": RuntimeError("Version mismatch: The cluster was started with:\n    Ray: 2.9.0\n"
                                     "This process on node 10.0.0.1 was started with:\n    Ray: 2.60.0"),
    "raylet-died": OSError(27, "File too large"),
}
CASES = [(k, addr) for k in FAILURES for addr in (None, "10.0.0.1:6379")]


@pytest.fixture
def ray_fails(monkeypatch):
    def arm(key):
        def init(*a, **k):
            raise FAILURES[key]
        monkeypatch.setattr(ray, "is_initialized", lambda: False)
        monkeypatch.setattr(ray, "init", init)
        # the address answered (test_ray_join asks it for real): ray.init's own failures here
        monkeypatch.setattr(ray_join, "check_answers", lambda address: None)
    return arm


def _pack_argv(tmp_path, address):
    return ["pack", GSM8K, "--tokenizer", GPT2, "--prompt-field", "question", "--response-field", "answer",
            "--no-progress", "--engine", "ray", "-o", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "c"),
            *(["--ray-address", address] if address else [])]


@pytest.mark.parametrize("key,address", CASES, ids=[f"{k}-{'address' if a else 'local'}" for k, a in CASES])
def test_ray_not_starting_is_one_line_naming_the_flag(tmp_path, monkeypatch, capsys, ray_fails, key, address):
    ray_fails(key)
    assert run_main(monkeypatch, ["--json", *_pack_argv(tmp_path, address)]) == [2]
    err = json.loads(capsys.readouterr().out)["error"]
    flag = "--ray-address" if address else "--engine"
    assert err["kind"] == "config" and err["flag"] == flag, err
    msg = err["message"]
    assert "\n" not in msg and "internal error" not in msg
    assert (f"--ray-address {address}: could not join" in msg) if address else \
        msg.startswith("--engine ray: the local Ray node did not start") and "--engine local" in msg
    assert type(FAILURES[key]).__name__ in msg  # Ray's reason, said
    assert not (tmp_path / "out").exists() and not (tmp_path / "c").exists()


def test_the_library_names_pack_rays_arguments(tmp_path, ray_fails):
    from packtool.engines.ray_engine import pack_ray
    from packtool.tokenize.config import TokenizeConfig
    ray_fails("node-timed-out")
    cfg = TokenizeConfig(tokenizer=GPT2, prompt_field="question", response_field="answer")
    with pytest.raises(PacktoolConfigError, match=r"^pack_ray: the local Ray node did not start .* ray_address ADDRESS"):
        pack_ray([GSM8K], tokenize=cfg, output=str(tmp_path / "o"), cache_dir=str(tmp_path / "c"))
    with pytest.raises(PacktoolConfigError, match=r"^ray_address 10.0.0.1:1: could not join"):
        pack_ray([GSM8K], tokenize=cfg, output=str(tmp_path / "o"), cache_dir=str(tmp_path / "c"),
                 ray_address="10.0.0.1:1")
