"""S45B-5's other door: a Ctrl-C (or SIGTERM) the instant after `plan -o` / `inspect --html`
put their file in place said "nothing was written (a file it writes appears whole or not at
all)", as stdout failing there said only "re-run" (then refused: the file exists). Every file
a command line puts in place through output.writes is named after a stop as complete."""
from __future__ import annotations

import numpy as np
import pytest

import packtool.cli as cli
from packtool.align import Alignment
from packtool.output import writes
from packtool.packing import pack
from packtool.planning.core import PackingConfig


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    d = tmp_path_factory.mktemp("stop")
    np.save(d / "lengths.npy", np.random.default_rng(3).integers(5, 100, 50))
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"input_ids": [list(range(1, n)) for n in (9, 20, 33)]}), d / "ids.parquet")
    pack([str(d / "ids.parquet")], Alignment(capacity=64), PackingConfig("bfd"), output=str(d / "out"),
         cache_dir=str(d / "cache"), progress=False)
    return d


COMMANDS = {
    "plan-o": (["plan", "--lengths", "{d}/lengths.npy", "-C", "128", "-o", "{t}/plan.parquet"], "{t}/plan.parquet"),
    "inspect-html": (["inspect", "{d}/out", "--html", "{t}/report.html"], "{t}/report.html"),
}


class _StopAfterPublish(list):
    """output.writes' record of what it put in place: Ctrl-C lands the moment a file is in place."""

    def append(self, item) -> None:
        super().append(item)
        raise KeyboardInterrupt


@pytest.mark.parametrize("name", COMMANDS)
def test_a_stop_right_after_the_file_is_in_place_names_it(made, tmp_path, monkeypatch, capsys, name):
    args, path = COMMANDS[name]
    monkeypatch.setattr(cli, "_leave", lambda code: (_ for _ in ()).throw(SystemExit(code)))
    monkeypatch.setattr(writes, "_WRITTEN", _StopAfterPublish())
    monkeypatch.setattr("sys.argv", ["packtool", *[a.format(d=made, t=tmp_path) for a in args]])
    with pytest.raises(SystemExit) as e:
        cli.main()
    path = path.format(t=tmp_path)
    (line,) = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]
    assert e.value.code == 130 and "Traceback" not in line
    assert f"after the file {path} was complete and in place" in line, line
    assert "nothing was written" not in line
    with open(path, "rb") as f:
        assert f.read(4).lower() in (b"par1", b"<!do", b"<htm")  # whole: its first bytes are its kind's
