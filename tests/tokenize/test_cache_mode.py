"""A tokenized cache entry has the mode a plain `mkdir` gives (0777 less the umask), built here
or pulled from an object store, so a team's shared --cache-dir is readable to whoever the umask
lets read (stranger F22: entries were 0700, private to their builder, and colleagues silently
rebuilt). While it is being built the staging folder stays private (mkdtemp's 0700)."""
from __future__ import annotations

import os
import stat

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from packtool.tokenize.config import TokenizeConfig
from packtool.tokenize.pipeline import tokenize_to_cache

CFG = TokenizeConfig(shape="tokens", side_columns=("lp",))


def _input(tmp_path) -> str:
    path = str(tmp_path / "in.parquet")
    pq.write_table(pa.table({"input_ids": pa.array([[1, 2, 3], [4, 5]], pa.list_(pa.int32())),
                             "lp": pa.array([[0.0, -1.0, -2.0], [0.0, -0.5]], pa.list_(pa.float32()))}), path)
    return path


@pytest.fixture
def umask():
    old = os.umask(0o022)
    os.umask(old)
    yield lambda m: os.umask(m)
    os.umask(old)


def _modes(root: str) -> dict[str, int]:
    """Every folder and file of a cache entry, by path inside it: its permission bits."""
    out = {".": stat.S_IMODE(os.stat(root).st_mode)}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            out[os.path.relpath(p, root)] = stat.S_IMODE(os.stat(p).st_mode)
    return out


@pytest.mark.parametrize("mask", [0o002, 0o022, 0o027, 0o077])
def test_a_built_entry_honours_the_umask(tmp_path, umask, mask):
    umask(mask)
    seen = []
    import packtool.tokenize.pipeline as pl
    orig = pl._build

    def spy(files, shapes, loaded, template, cfg, tmp, *a, **k):  # the staging folder, mid-build
        seen.append(stat.S_IMODE(os.stat(tmp).st_mode))
        return orig(files, shapes, loaded, template, cfg, tmp, *a, **k)
    pl._build, restore = spy, orig
    try:
        cache = tokenize_to_cache([_input(tmp_path)], CFG, str(tmp_path / "cache"), progress=False)
    finally:
        pl._build = restore
    assert seen == [0o700]  # private while half-built
    modes = _modes(cache.root)
    dirs = {k for k in modes if os.path.isdir(os.path.join(cache.root, k))}
    assert {modes[k] for k in dirs} == {0o777 & ~mask}, modes
    assert {modes[k] for k in set(modes) - dirs} == {0o666 & ~mask}, modes


def test_a_pulled_entry_honours_the_umask(s3, tmp_path, umask, monkeypatch):
    umask(0o027)
    src = _input(tmp_path)
    store = f"{s3}/cache"
    monkeypatch.setenv("PACKTOOL_CACHE_DIR", str(tmp_path / "a"))
    tokenize_to_cache([src], CFG, store, progress=False)
    monkeypatch.setenv("PACKTOOL_CACHE_DIR", str(tmp_path / "b"))  # another machine: pulls it
    import packtool.tokenize.pipeline as pl
    monkeypatch.setattr(pl, "_build", lambda *a, **k: pytest.fail("rebuilt instead of pulled"))
    cache = tokenize_to_cache([src], CFG, store, progress=False)
    assert cache.root.startswith(str(tmp_path / "b"))
    assert stat.S_IMODE(os.stat(cache.root).st_mode) == 0o750


@pytest.mark.parametrize("mask", [0o002, 0o027])
def test_a_packed_output_honours_the_umask(tmp_path, umask, mask):
    # every file pack writes (slabs, manifest through the exclusive create, lock) has 0666 less
    # the umask, like touch: with umask 002 the manifest was 0644 beside group-writable slabs
    from packtool.align import Alignment
    from packtool.packing import pack
    from packtool.planning.core import PackingConfig
    umask(mask)
    out = tmp_path / "out"
    pack([_input(tmp_path)], Alignment(capacity=16), PackingConfig("bfd"), CFG, str(out),
         cache_dir=str(tmp_path / "cache"))
    files = {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir() if p.is_file()}
    assert ".manifest.json" in files and any(n.endswith(".parquet") for n in files), files
    assert set(files.values()) == {0o666 & ~mask}, files
