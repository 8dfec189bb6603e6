"""Every default count of threads and processes follows the CPUs this process may run on
(`workers.cores`), not the host's: under taskset or a cgroup cpuset of 2 of 16 cores, pack
started 16 shard writers (each holding a row group) and verify 16 workers."""
from __future__ import annotations

import ast
import os
import pathlib

import pytest

import packtool
import packtool.slabs.writer as writer
from packtool import workers

PKG = pathlib.Path(packtool.__file__).parent


def test_cores_follows_the_affinity_mask(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3, 7}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert workers.cores() == 2


def test_cores_without_affinity_is_the_cpu_count(monkeypatch):
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 5)
    assert workers.cores() == 5


def test_the_shard_writers_default_to_the_allowed_cores(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    seen = []
    real = writer.thread_pool
    monkeypatch.setattr(writer, "thread_pool", lambda n, name: seen.append(n) or real(n, name))
    writer.run_shards(8, lambda k, cb, ahead: k)
    assert seen == [2]


def _calls_cpu_count(path: pathlib.Path) -> list[int]:
    tree = ast.parse(path.read_text(), str(path))
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "cpu_count"
            and isinstance(n.value, ast.Name) and n.value.id == "os"]


@pytest.mark.parametrize("path", sorted(p for p in PKG.rglob("*.py") if p.name != "workers.py"),
                         ids=lambda p: str(p.relative_to(PKG)))
def test_no_module_but_workers_reads_the_host_cpu_count(path):
    assert not _calls_cpu_count(path), f"{path}: os.cpu_count() at lines {_calls_cpu_count(path)}; ask workers.cores()"
