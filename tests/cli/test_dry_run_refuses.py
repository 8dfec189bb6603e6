"""`pack --dry-run -o X` refuses every --output the real run refuses, in the same line and
before any work (L3): a dry run used to skip the output's checks whole, so an --output inside
the cache, holding it, holding the input, inside a packed output or a previous output without
--overwrite passed with exit 0, the dry run telling the user nothing of the refusal the real
run would meet. Every place of the kind (a folder, a store prefix) on both engines; the real
run's refusal is the reference, the dry run must say the same and write nothing."""
from __future__ import annotations

import json
import os
import shutil

import pytest
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.storage import locate

runner = CliRunner()
ROWS = "".join(json.dumps({"input_ids": list(range(1, 6 + i % 4))}) + "\n" for i in range(12))

# case: (the input under ROOT, the --output, the --cache-dir or None for a local one, [user files]);
# P is a packed output, IN holds the input file in.jsonl
FOLDER = {
    "output inside the cache": ("in.jsonl", "C/out", "C", []),
    "output holds the cache": ("in.jsonl", "O", "O/cache", []),
    "output is the working directory": ("in.jsonl", ".", None, []),
    "output holds the input": ("IN/in.jsonl", "IN", None, []),
    "output inside the input folder": ("IN", "IN/out", None, []),
    "output inside a packed output": ("in.jsonl", "P/sub", None, []),
    "output is a previous output": ("in.jsonl", "P", None, []),
    "output is a file": ("in.jsonl", "notes.txt", None, ["notes.txt"]),
    "output holds files not packtool's": ("in.jsonl", "USER", None, ["USER/mine.txt"]),
}
STORE = {
    "output inside the cache": ("in.jsonl", "C/out", "C", []),
    "output holds the cache": ("in.jsonl", "O", "O/cache", []),
    "output holds the input": ("IN/in.jsonl", "IN", None, []),
    "output inside the input prefix": ("IN", "IN/out", None, []),
    "output inside a packed output": ("in.jsonl", "P/sub", None, []),
    "output is a previous output": ("in.jsonl", "P", None, []),
    "output is an object": ("in.jsonl", "notes.txt", None, ["notes.txt"]),
    "output holds objects not packtool's": ("in.jsonl", "USER", None, ["USER/mine.txt"]),
}


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """A packed output's files, put at P in each test's root."""
    base = tmp_path_factory.mktemp("packed")
    (base / "in.jsonl").write_text(ROWS)
    r = runner.invoke(app, ["pack", str(base / "in.jsonl"), "-C", "64", "-q", "-o", str(base / "P"),
                            "--cache-dir", str(base / "cache")])
    assert r.exit_code == 0, r.output
    return base / "P"


def _files(root: str) -> list[str]:
    if root.startswith("s3://"):
        return sorted(i.path for i in locate(root).list() if i.type.name == "File")
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs)


def _put(root: str, rel: str, data: bytes) -> None:
    if root.startswith("s3://"):
        locate(f"{root}/{rel}").write_bytes(data)
    else:
        os.makedirs(os.path.dirname(os.path.join(root, rel)) or root, exist_ok=True)
        with open(os.path.join(root, rel), "wb") as f:
            f.write(data)


def _error(r) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stdout + r.stderr
    return lines[0]


@pytest.mark.parametrize("engine", ["local", "ray"])
@pytest.mark.parametrize("kind,case", [("folder", c) for c in sorted(FOLDER)] + [("store", c) for c in sorted(STORE)])
def test_a_dry_run_refuses_the_output_the_real_run_refuses(kind, case, engine, packed, tmp_path, monkeypatch, request):
    if engine == "ray":
        pytest.importorskip("ray", reason="the ray extra is not installed")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    root = request.getfixturevalue("s3") if kind == "store" else str(work)
    src, out, cache, users = (FOLDER if kind == "folder" else STORE)[case]
    _put(root, src if src.endswith(".jsonl") else f"{src}/in.jsonl", ROWS.encode())
    for n in os.listdir(packed):
        _put(root, f"P/{n}", (packed / n).read_bytes())
    for u in users:
        _put(root, u, b"the user's own\n")
    j = (lambda p: p if p == "." else f"{root}/{p}")
    cmd = ["pack", j(src), "-C", "64", "-q", "--engine", engine, "-o", j(out),
           "--cache-dir", j(cache) if cache else str(tmp_path / "cache")]
    before = _files(root)
    real = runner.invoke(app, cmd)
    assert real.exit_code != 0, real.stdout + real.stderr
    assert _files(root) == before
    dry = runner.invoke(app, [*cmd, "--dry-run"])
    assert (dry.exit_code, _error(dry)) == (real.exit_code, _error(real))
    assert _files(root) == before and not os.path.exists(tmp_path / "cache")  # refused before tokenizing
