"""S50A-4: a local place spelled `file://` or `local://` escaped the place rules and the output lock:
`-o file://$PWD/data/out` and `--cache-dir file://$PWD/data/cache` were taken inside the folder input
`data`, an input `file://$PWD/data/` let `-o data/out2` in, and `-o file://$PWD/out` took the store
door's lease inside OUT while a `-o out` run held the lock beside it: both wrote OUT. Such a URI is
the local path it names at the one rule for path arguments (params.expanded), by every door."""
from __future__ import annotations

import fcntl
import json
import os

import pytest
from typer.testing import CliRunner

import packtool
from packtool import Alignment
from packtool.cli.app import app
from packtool.errors import PacktoolError
from packtool.output.lock import lock_file, lock_text

runner = CliRunner()
SCHEMES = ["file", "local"]


@pytest.fixture
def proj(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.mkdir("data")
    with open("data/toks.jsonl", "w") as f:
        for i in range(20):
            f.write(json.dumps({"input_ids": list(range(1, 8 + i % 5))}) + "\n")
    return tmp_path


def _uri(scheme: str, rel: str) -> str:
    return f"{scheme}://{os.path.abspath(rel)}"


# (arguments, the place refused, its flag): every place rule a folder input sets, each place spelled as a URI
DOORS = {
    "-o inside the input": (lambda s: ["data", "-o", _uri(s, "data/out")], "data/out", "--output"),
    "--cache-dir inside the input": (lambda s: ["data", "--cache-dir", _uri(s, "data/cache"), "--dry-run"],
                                     "data/cache", "--cache-dir"),
    "input spelled as a URI": (lambda s: [_uri(s, "data") + "/", "-o", "data/out2"], "data/out2", "--output"),
}


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("door", DOORS)
def test_a_local_uri_is_held_to_the_place_rules(proj, door, scheme):
    argv, place, flag = DOORS[door]
    r = runner.invoke(app, ["--json", "pack", *argv(scheme), "-C", "64", "--no-progress", "-q"])
    assert r.exit_code == 2, r.stdout + r.stderr
    err = json.loads(r.stdout.strip().splitlines()[-1])["error"] if r.stdout.strip() else None
    assert err and err["flag"] == flag and "inside the input folder" in err["message"], r.stdout + r.stderr
    assert not os.path.lexists(place) and sorted(os.listdir("data")) == ["toks.jsonl"]


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("door", ["cli", "library"])
def test_a_local_uri_output_takes_the_paths_lock(proj, door, scheme):
    """A run writing OUT (the lock beside it held) refuses a second run naming OUT as a URI."""
    target = os.path.abspath("out")
    with open(lock_file(target), "wb") as f:
        f.write(lock_text())
        f.flush()
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        if door == "cli":
            r = runner.invoke(app, ["pack", "data", "-C", "64", "-o", _uri(scheme, "out"), "--no-progress", "-q"])
            assert r.exit_code == 2 and "is writing this output" in r.stderr, r.stdout + r.stderr
        else:
            with pytest.raises(PacktoolError, match="is writing this output"):
                packtool.pack("data", Alignment(capacity=64), output=_uri(scheme, "out"))
    assert not os.path.lexists("out")


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("door", ["cli -o", "library path", "locate"])
def test_a_local_uri_with_a_host_part_is_refused_not_read_as_another_path(proj, scheme, door):
    """R2B-6: urlsplit keeps `data` of `local://data/out` as the host, so the path was /out: a run
    wrote at the file system's root without a word. A host part (other than localhost) is refused."""
    uri = f"{scheme}://data/out"
    there = os.path.exists("/out")
    if door == "cli -o":
        r = runner.invoke(app, ["pack", "data/toks.jsonl", "-C", "64", "-o", uri, "--no-progress", "-q"])
        said = r.stderr
        assert r.exit_code == 2 and said.count("\n") == 1, said
    else:
        with pytest.raises(PacktoolError) as e:
            if door == "library path":
                from packtool.params import path
                path("output", uri)
            else:
                from packtool.storage import locate
                locate(uri, name="output")
        said = str(e.value)
    assert "names host 'data'" in said and f"{scheme}:///data/out" in said, said
    assert os.path.exists("/out") == there


@pytest.mark.parametrize("spelled", ["file:///{p}", "file://localhost/{p}", "local:///{p}"])
def test_a_local_uri_of_no_host_or_localhost_is_the_path(proj, spelled):
    from packtool.storage import locate
    p = os.path.abspath("data").lstrip("/")
    assert locate(spelled.format(p=p)).path == "/" + p
