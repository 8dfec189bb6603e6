"""S47A-5: a `.npy` given to --lengths that is no .npy file (0 bytes: what a killed np.save or a
failed copy leaves; a text file, a pickle, any bytes without numpy's magic) was "internal error (a
packtool bug) EOFError", exit 3, or numpy's "contains pickled (object) data. If you trust the file
you can load it unsafely using allow_pickle=", advice to unpickle a file that is not a pickle. Now
one exit-2 line naming the file and the flag, kind input, in every command that reads --lengths."""
from __future__ import annotations

import io
import json
import pickle

import numpy as np
import pytest
from typer.testing import CliRunner

from packtool.cli.app import app

runner = CliRunner()


def _pickled_npy() -> bytes:
    b = io.BytesIO()
    np.save(b, np.array([1, "a"], dtype=object), allow_pickle=True)
    return b.getvalue()


CONTENTS = {"empty": b"", "one byte": b"x", "text": b"5\n1\n", "pickle": pickle.dumps([5, 1]),
            "magic only": b"\x93NUMPY", "object array": _pickled_npy()}
COMMANDS = {"plan": ["plan", "-C", "64"], "inspect": ["inspect", "-C", "64"]}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("content", CONTENTS)
def test_a_npy_that_is_not_one_is_one_line_naming_the_file(tmp_path, command, content):
    p = tmp_path / "z.npy"
    p.write_bytes(CONTENTS[content])
    r = runner.invoke(app, ["--json", *COMMANDS[command], "--lengths", str(p)])
    assert r.exit_code == 2, r.output
    err = json.loads(r.stdout.strip().splitlines()[-1])["error"]
    msg = err["message"]
    assert (err["kind"], err["flag"]) == ("input", "--lengths"), err
    assert msg.startswith(f"{p}: ") and "\n" not in msg and "internal" not in msg, msg
    assert "allow_pickle" not in msg and "trust the file" not in msg, msg  # never advice to unpickle
    assert ".npy" in msg, msg
    if content == "empty":
        assert "0 bytes" in msg, msg
