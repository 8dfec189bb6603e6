"""`packtool.verify` called from a script without `if __name__ == "__main__":` (as README's
library example reads): verify's worker processes would import the script and run its top
level again, so a script that packed with overwrite=True started a second pack of the same
output in a worker (and verify warned that its pool broke). Such a caller is checked in
its own process instead."""
from __future__ import annotations

import subprocess
import sys
import textwrap

from conftest import GPT2, PEPS


def test_unguarded_script_runs_once_and_verifies(tmp_path):
    script = tmp_path / "pack_and_check.py"
    script.write_text(textwrap.dedent(f"""
        import os, sys
        print("top-level", os.getpid(), file=sys.stderr)
        import packtool
        from packtool import Alignment, PackingConfig, TokenizeConfig
        packtool.pack([{PEPS!r}], Alignment(capacity=512), PackingConfig(overflow="split"),
                      TokenizeConfig(tokenizer={GPT2!r}), output="out", overwrite=True,
                      cache_dir="cache", shard_tokens=4096)
        r = packtool.verify("out", workers=2)
        print("ok" if r.ok and r.shards > 1 else f"bad {{r}}")
    """))
    p = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "ok", p.stdout + p.stderr
    assert p.stderr.count("top-level") == 1, p.stderr
    assert "process pool failed" not in p.stderr and "another packtool pack" not in p.stderr, p.stderr
