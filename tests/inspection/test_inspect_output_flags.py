"""S39-5: `inspect OUT` ignored every planning flag typed with it (`--dp 8`, `--fp8 blockwise`,
`-a ffd`, even `--tp 0`, `-C -5`, `--seed -1`): the report was the manifest's, exit 0, no note,
as if the user's question ("how would this output look at dp=8?") had been answered. A packed
output records every setting, as a plan file does, and is held to the same rule as `--plan`
(inspection.planned.held_to_record): a typed flag is the record's or refused in one line naming
it, an out-of-range value refused as everywhere; the library's `inspect_packed(given=)` too."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.errors import PacktoolError

runner = CliRunner()

# every planning flag: (a value that differs from the record, the record's own value, what the line names)
FLAGS = {
    "capacity": (["-C", "128"], ["-C", "64"], "-C 128"),
    "tp": (["--tp", "2"], ["--tp", "1"], "--tp 2"),
    "cp": (["--cp", "2"], ["--cp", "1"], "--cp 2"),
    "sp": (["--sp"], ["--no-sp"], None),  # the record's tp=1 has no SP: --sp is resolved against it, as for --plan
    "fp8": (["--fp8", "blockwise"], ["--fp8", "none"], "--fp8 blockwise"),
    "fixed_length": (["--fixed-length", "64"], None, "--fixed-length 64"),
    "convention": (["--convention", "nemo-rl"], ["--convention", "packtool"], "--convention nemo-rl"),
    "algorithm": (["-a", "ffd"], ["-a", "bfd"], "-a ffd"),
    "overflow": (["--overflow", "split"], ["--overflow", "error"], "--overflow split"),
    "dp": (["--dp", "8"], ["--dp", "1"], "--dp 8"),
    "seed": (["--seed", "3"], ["--seed", "0"], "--seed 3"),
}
OUT_OF_RANGE = {"--tp 0": ["--tp", "0"], "-C -5": ["-C", "-5"], "--seed -1": ["--seed", "-1"],
                "--dp 0": ["--dp", "0"], "--cp 0": ["--cp", "0"]}


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    d = tmp_path_factory.mktemp("inspect_flags")
    with open(d / "toks.jsonl", "w") as f:
        for i in range(40):
            f.write(json.dumps({"input_ids": list(range(1, 8 + i % 5))}) + "\n")
    r = runner.invoke(app, ["pack", str(d / "toks.jsonl"), "-C", "64", "--cache-dir", str(d / "cache"), "-q",
                            "-o", str(d / "packed")])
    assert r.exit_code == 0, r.output
    return str(d / "packed")


def _one_line(r):
    text = r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.exit_code == 2 and len(lines) == 1 and "Traceback" not in text, text
    return lines[0]


@pytest.mark.parametrize("name", [n for n in FLAGS if FLAGS[n][2]])
def test_a_planning_flag_that_differs_from_the_record_is_refused(packed, name):
    differs, _, said = FLAGS[name]
    line = _one_line(runner.invoke(app, ["inspect", packed, *differs, "-q", "--no-what-if"]))
    assert f"but {said} was passed" in line and "the output's manifest records every setting" in line, line


@pytest.mark.parametrize("name", [n for n in FLAGS if FLAGS[n][1]])
def test_the_records_own_value_is_taken(packed, name):
    r = runner.invoke(app, ["inspect", packed, *FLAGS[name][1], "-q", "--no-what-if", "--json"])
    assert r.exit_code == 0, r.output
    json.loads(r.stdout)


@pytest.mark.parametrize("case", OUT_OF_RANGE)
def test_an_out_of_range_value_is_refused(packed, case):
    line = _one_line(runner.invoke(app, ["inspect", packed, *OUT_OF_RANGE[case], "-q", "--no-what-if"]))
    assert OUT_OF_RANGE[case][0].replace("-C", "--max-tokens") in line, line


def test_json_says_it_as_an_error(packed):
    r = runner.invoke(app, ["inspect", packed, "--dp", "8", "-q", "--no-what-if", "--json"])
    assert r.exit_code == 2 and "--dp 8 was passed" in json.loads(r.stdout)["error"]["message"]


def test_the_library_holds_given_settings_to_the_manifest(packed):
    from packtool.inspection.packed import inspect_packed
    with pytest.raises(PacktoolError, match="dp=8"):
        inspect_packed(packed, what_if=False, given={"dp": 8})
    assert inspect_packed(packed, what_if=False, given={"dp": 1}).dp is not None
