"""A Hub dataset name that is not in the local cache, with the Hub offline (asked for by any of
the variables the Hub libraries read, or no network), fails at once with the one-line offline
hint: no name lookup, no connection, so no ~25 s of retries. The libraries read those variables
once, at import: a process that imported `datasets` before the variable was set (a notebook, a
training script, this test process) retried the network for ~23 s before the hint, though the
environment said offline. Every entry that reads a name (the CLI with and without --split and
with --config, the library's pack(NAME, split=...)) and every way of saying offline."""
from __future__ import annotations

import os
import socket

import pytest
from typer.testing import CliRunner

from packtool.align import Alignment
from packtool.cli.app import app
from packtool.errors import PacktoolInputError
from packtool.packing import pack
from packtool.tokenize.config import TokenizeConfig

datasets = pytest.importorskip("datasets", reason="the hf extra (datasets) is not installed")
import huggingface_hub.constants as hub_constants  # noqa: E402  (datasets installs it)
import packtool.tokenize.hub_load as hf  # noqa: E402

NAME = "packtool-tests/no-such-dataset"
VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
OFFLINE = {"HF_HUB_OFFLINE=1": {"HF_HUB_OFFLINE": "1"}, "HF_HUB_OFFLINE=true": {"HF_HUB_OFFLINE": "true"},
           "HF_DATASETS_OFFLINE=1": {"HF_DATASETS_OFFLINE": "1"}, "TRANSFORMERS_OFFLINE=1": {"TRANSFORMERS_OFFLINE": "1"},
           "no network": {}}


class Dialed(Exception):
    """Raised by the guarded socket calls: not an OSError, so no retry loop swallows it."""


def _cli(*extra):
    def run(tmp_path):
        r = CliRunner().invoke(app, ["pack", NAME, *extra, "--shape", "tokens", "-o", str(tmp_path / "o"),
                                     "--cache-dir", str(tmp_path / "c")])
        assert r.exit_code == 2, r.output
        assert len(r.output.strip().splitlines()) <= 3, r.output  # one line (rich may wrap it)
        return r.output
    return run


def _library(tmp_path):
    with pytest.raises(PacktoolInputError) as e:
        pack(NAME, Alignment(capacity=64), tokenize=TokenizeConfig(), output=str(tmp_path / "o"),
             cache_dir=str(tmp_path / "c"), progress=False, split="train")
    return str(e.value)


ENTRIES = {"cli --split": _cli("--split", "train"), "cli no --split": _cli(),
           "cli --split --config": _cli("--split", "train", "--config", "main"), "library pack(split=)": _library}


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("offline", OFFLINE)
def test_an_uncached_name_offline_fails_at_once_without_touching_the_network(tmp_path, monkeypatch, offline, entry):
    for k in VARS:
        monkeypatch.delenv(k, raising=False)
    # as imported before the variable was set: the libraries' constants say online
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", False)
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    for k, v in OFFLINE[offline].items():
        monkeypatch.setenv(k, v)
    env_before = {k: os.environ.get(k) for k in VARS}
    probed = []

    def probe(timeout=2.0):  # no network: the probe's own answer; asked offline: never probed
        probed.append(timeout)
        return False
    monkeypatch.setattr(hf, "_hub_reachable", probe)
    dialed = []

    def guard(name):
        def refuse(*a, **k):
            dialed.append((name, a[:2]))
            raise Dialed(f"{name}{a[:2]}")
        return refuse
    monkeypatch.setattr(socket, "getaddrinfo", guard("getaddrinfo"))
    monkeypatch.setattr(socket.socket, "connect", guard("connect"))
    monkeypatch.setattr(socket.socket, "connect_ex", guard("connect_ex"))

    said = ENTRIES[entry](tmp_path)

    assert dialed == [], dialed
    assert f"{NAME}: dataset not in the local cache and the Hub cannot be reached" in said, said
    assert "pass DIR" in said, said
    assert probed == ([] if OFFLINE[offline] else [2.0])
    assert not os.path.exists(tmp_path / "o")
    # the call's offline mode is its own: the caller's environment and the libraries' constants are as they were
    assert {k: os.environ.get(k) for k in VARS} == env_before
    assert datasets.config.HF_HUB_OFFLINE is False and datasets.config.HF_DATASETS_OFFLINE is False
    assert hub_constants.HF_HUB_OFFLINE is False


@pytest.mark.parametrize("env", [{"HF_HUB_OFFLINE": "0"}, {"HF_HUB_OFFLINE": "false"}, {"HF_HUB_OFFLINE": ""},
                                 {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "0"}], ids=str)
def test_online_said_asks_the_hub_when_it_answers(monkeypatch, env):
    """Not offline as `datasets` reads the variables (HF_DATASETS_OFFLINE over HF_HUB_OFFLINE):
    the Hub is probed and, reachable, asked; nothing is forced offline."""
    for k in VARS:
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    seen = []
    monkeypatch.setattr(hf, "_hub_reachable", lambda timeout=2.0: seen.append("probe") or True)

    def load(spec, config=None, split=None):
        seen.append((os.environ.get("HF_HUB_OFFLINE"), datasets.config.HF_HUB_OFFLINE))
        raise ConnectionError("the Hub said no")
    monkeypatch.setattr(datasets, "load_dataset", load)
    with pytest.raises(PacktoolInputError, match="not in the local cache"):
        hf.load_dataset(NAME, "train", None)
    assert seen == ["probe", (env["HF_HUB_OFFLINE"], False)]
