"""A worker count whose processes cannot fit is refused before any process starts (issue 23
class 3): `verify --workers 4096` on a 301-shard output started 301 processes, ~270 MB
resident each, and the machine's load passed 300 with no line. planning.bounds.check_processes
owns the estimate (PROCESS_BYTES a process, half the memory available); here the machine is
made small by patching what it reports available, so the test starts nothing either way."""
from __future__ import annotations

import json

import pytest
from slab_support import write_pack
from typer.testing import CliRunner

import packtool
from packtool.align import Alignment
from packtool.cli.app import app
from packtool.errors import PacktoolConfigError
from packtool.planning import bounds
from packtool import workers as pools

GIB = 1 << 30


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    out, _ = write_pack(str(tmp_path_factory.mktemp("w")), [40, 70, 33, 90, 61, 17] * 20,
                        Alignment(capacity=128), shard_tokens=512, group_tokens=128)
    return out


@pytest.fixture
def small_machine(monkeypatch):
    monkeypatch.setattr(bounds, "available_bytes", lambda: 1 * GIB)  # room for 4 processes
    started = []
    monkeypatch.setattr(pools, "process_pool", lambda n: started.append(n) or pytest.fail("a pool started"))
    return started


def _cli(out, workers, *extra):
    return CliRunner().invoke(app, ["verify", out, "--workers", str(workers), *extra])


@pytest.mark.parametrize("entry", ["library", "cli", "cli-json"])
@pytest.mark.parametrize("workers", [5, 64, 4096])
def test_more_processes_than_fit_are_refused_before_any_starts(packed, small_machine, entry, workers):
    if entry == "library":
        with pytest.raises(PacktoolConfigError) as e:
            packtool.verify(packed, workers=workers)
        msg = str(e.value)
        assert "workers=" in msg and "workers=4 or fewer" in msg, msg
    else:
        r = _cli(packed, workers, *(["--json"] if entry == "cli-json" else []))
        assert r.exit_code == 2 and "Traceback" not in r.output, r.output
        if entry == "cli-json":
            err = json.loads(r.stdout)["error"]
            assert err["flag"] == "--workers" and err["kind"] == "config", err
            msg = err["message"]
        else:
            msg = r.output.strip()
            assert msg.count("\n") == 0 and msg.startswith("error:"), msg
        assert "--workers 4 or fewer" in msg, msg
    assert "verify processes" in msg and "available" in msg and small_machine == []


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_what_fits_still_runs(packed, monkeypatch, workers):
    monkeypatch.setattr(bounds, "available_bytes", lambda: 1 * GIB)
    assert packtool.verify(packed, workers=workers).ok


def test_the_bound_is_on_the_processes_started_not_the_number_asked(packed, monkeypatch):
    # fewer pieces of work than --workers: only as many processes start, and those fit
    monkeypatch.setattr(bounds, "available_bytes", lambda: 1 * GIB)
    with pytest.raises(PacktoolConfigError):
        bounds.check_processes(5, "workers", 4096, "verify processes")
    bounds.check_processes(4, "workers", 4096, "verify processes")
    bounds.check_processes(1, "workers", 4096, "verify processes")  # one process is this one


def test_a_local_ray_node_of_more_workers_than_fit_is_refused_before_ray_starts(tmp_path, small_machine,
                                                                                 monkeypatch):
    # pack_ray(num_cpus=) (the library's; the CLI's --engine ray starts one per core)
    from packtool.engines import ray_engine
    monkeypatch.setattr(ray_engine, "init_ray", lambda *a, **k: pytest.fail("Ray started"))
    data = tmp_path / "ids.jsonl"
    data.write_text("".join(json.dumps({"input_ids": list(range(1, 9))}) + "\n" for _ in range(4)))
    out = tmp_path / "out"
    with pytest.raises(PacktoolConfigError) as e:
        ray_engine.pack_ray([str(data)], Alignment(capacity=64), output=str(out), num_cpus=4096,
                            cache_dir=str(tmp_path / "c"))
    msg = str(e.value)
    assert "num_cpus=4096" in msg and "num_cpus=4 or fewer" in msg, msg
    assert "Ray worker processes" in msg and not out.exists()
