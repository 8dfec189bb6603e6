"""RA-6: resolve_inputs told each file's input (for refuse_repeats: a second name inside one folder
or glob is read once, the same file named twice refused) by searching the inputs back from the
last for every file, quadratic in the inputs named (8 s over 16,000 shell-expanded files). It is
one pass now; what each file is told must stay the same: its own input and the folder that input
types, if a folder or a glob (S48A-13)."""
from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

import packtool.tokenize.readers as readers
from packtool.tokenize.repeats import origins


def _jsonl(path) -> None:
    path.write_text(json.dumps({"text": str(path)}) + "\n")


def test_each_file_is_told_its_own_input(tmp_path, monkeypatch):
    (tmp_path / "d").mkdir()
    (tmp_path / "g").mkdir()
    _jsonl(tmp_path / "one.jsonl")
    for i in range(2):
        _jsonl(tmp_path / "d" / f"{i}.jsonl")
    for i in range(5):
        _jsonl(tmp_path / "g" / f"{i}.jsonl")
    _jsonl(tmp_path / "last.jsonl")
    seen = {}

    def capture(files, origin, inputs, quiet):
        seen["origin"] = origin
        return files
    monkeypatch.setattr(readers, "refuse_repeats", capture)
    inputs = [str(tmp_path / "one.jsonl"), str(tmp_path / "d"), str(tmp_path / "g" / "*.jsonl"),
              str(tmp_path / "last.jsonl")]
    files = readers.resolve_inputs(inputs, quiet=True)
    assert len(files) == 9
    # with the folder each input types (a glob's fixed part): a second name found below it is no path typed twice
    d, g = str(tmp_path / "d"), str(tmp_path / "g")
    assert seen["origin"] == [(0, None)] + [(1, d)] * 2 + [(2, g)] * 5 + [(3, None)]


def test_many_inputs_of_one_file_each(tmp_path, monkeypatch):
    names = []
    for i in range(300):
        _jsonl(tmp_path / f"f{i:03d}.jsonl")
        names.append(str(tmp_path / f"f{i:03d}.jsonl"))
    seen = {}
    monkeypatch.setattr(readers, "refuse_repeats", lambda files, origin, inputs, quiet: seen.update(o=origin) or files)
    assert len(readers.resolve_inputs(names, quiet=True)) == 300
    assert seen["o"] == [(i, None) for i in range(300)]


class _Counted(Sequence):
    """Marks that count each element read (by index, iteration, slice or reversal)."""

    def __init__(self, items):
        self.items, self.reads = list(items), 0

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        got = self.items[i]
        self.reads += len(got) if isinstance(i, slice) else 1
        return got


@pytest.mark.parametrize("per_input", [1, 3])
def test_the_origins_read_each_mark_a_bounded_number_of_times(per_input):
    """RA-8: the test above passed on the quadratic search back it replaced (RA-6), the one
    owner of the origins (repeats.origins) is held to its cost here, by the marks it reads (no
    clock): a constant number of reads per input, so a search back per file fails."""
    m = 3000
    marks = _Counted((i * per_input, i, None if i % 2 else f"d{i}") for i in range(m))
    got = origins(marks, m * per_input)
    assert got == [(i, None if i % 2 else f"d{i}") for i in range(m) for _ in range(per_input)]
    assert marks.reads <= 4 * m, marks.reads
