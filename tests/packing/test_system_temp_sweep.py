"""The system temp folder holds a store output's staged shards and spill (output.store,
output.folder): the next run removes those of this user's dead runs, and nothing else."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

from packtool.output.stale import clean_system_temp


def test_only_dead_runs_packtool_folders_are_removed(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    names = {f"packtool-tmp-{dead}-abc": False, f"packtool-spill-{dead}-x": False,  # removed
             f"packtool-tmp-{os.getpid()}-live": True,  # this process: alive
             f"mytool-tmp-{dead}-x": True, f"packtool-notes-{dead}": True, "packtool-tmp-abc-1": True}
    for n in names:
        (tmp_path / n).mkdir()
        (tmp_path / n / "slabs-00000.parquet").write_bytes(b"x")
    link = tmp_path / f"packtool-spill-{dead}-link"
    os.symlink(tmp_path / f"mytool-tmp-{dead}-x", link)  # removed as a link, its target kept
    assert clean_system_temp() == 3
    assert sorted(os.listdir(tmp_path)) == sorted(n for n, keep in names.items() if keep)
    assert (tmp_path / f"mytool-tmp-{dead}-x" / "slabs-00000.parquet").exists()
