"""`packtool.verify` called from a user's script: verify's worker processes never import the
caller's main module (packtool/workers.py launches them with `__main__` hidden), so a
script's top-level `pack(..., overwrite=True)` runs once whatever the script holds: no
guard (README's library example), a guard, or an unrelated `if __name__ == "__main__":`
block (the old guard test was a text search, which that block fooled). The checks still run
in worker processes."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from conftest import GPT2, PEPS

BODY = f"""
import os, sys
print("top-level", os.getpid(), file=sys.stderr)
import packtool
from packtool import Alignment, PackingConfig, TokenizeConfig
from packtool import workers
packtool.pack([{PEPS!r}], Alignment(capacity=512), PackingConfig(overflow="split"),
              TokenizeConfig(tokenizer={GPT2!r}), output="out", overwrite=True,
              cache_dir="cache", shard_tokens=4096)
r = packtool.verify("out", workers=2)
print("ok" if r.ok and r.shards > 1 and workers._PROCESS_POOLS else f"bad {{r}} pools={{workers._PROCESS_POOLS}}")
"""
SCRIPTS = {
    "no guard": BODY,
    "an unrelated __main__ block": BODY + '\nif __name__ == "__main__":\n    print("main block", file=sys.stderr)\n',
    "everything guarded": "def main():\n" + textwrap.indent(BODY, "    ") + '\n\nif __name__ == "__main__":\n    main()\n',
}


@pytest.mark.parametrize("kind,how", [("no guard", "python script.py"),
                                      ("an unrelated __main__ block", "python script.py"),
                                      ("an unrelated __main__ block", "python -m script"),
                                      ("everything guarded", "python script.py")])
def test_script_runs_once_and_verifies_in_workers(tmp_path, kind, how):
    (tmp_path / "pack_and_check.py").write_text(SCRIPTS[kind])
    cmd = [sys.executable, "pack_and_check.py"] if how == "python script.py" else [sys.executable, "-m", "pack_and_check"]
    p = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "ok", p.stdout + p.stderr
    assert p.stderr.count("top-level") == 1, p.stderr
    assert p.stderr.count("main block") == (1 if "unrelated" in kind else 0), p.stderr
    assert "process pool failed" not in p.stderr and "another packtool pack" not in p.stderr, p.stderr
