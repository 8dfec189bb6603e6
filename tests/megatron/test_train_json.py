"""`packtool train` takes --json as every command does (README: "`--json` goes before or after the
subcommand"); before (S40-5) `packtool --json train ...` was refused as "No such option: --json"
for a flag the top-level --help lists. The class: --json in each position the README shows, for
a run that ends (one JSON object on stdout, no step table, the notes under `notes`, the figures
those of --json-log's last line) and for a run refused (a JSON error object, kind config)."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("megatron.core")
pytest.importorskip("typer")
from megatron_runs import TINY, run_cli as _run, slabs  # noqa: E402,F401  (slabs: a fixture)


POSITIONS = {"before the subcommand (the finding)": lambda c, rest: ["--json", c, *rest],
             "after the subcommand": lambda c, rest: [c, "--json", *rest],
             "at the end": lambda c, rest: [c, *rest, "--json"]}




@pytest.mark.parametrize("where", list(POSITIONS))
def test_a_run_ends_in_one_json_object(slabs, tmp_path, where):
    log = tmp_path / "log.jsonl"
    r = _run(POSITIONS[where]("train", [slabs, *TINY, "--steps", "2", "--lr", "0", "--json-log", str(log)]))
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)  # the whole of stdout: no step table around it
    last = json.loads(log.read_text().splitlines()[-1])
    assert out["final_step"] == 2 and out["steps_run"] == 2 and out["params"] > 0, out
    assert out["last_step"]["step"] == last["step"] and out["last_step"]["loss"] == last["loss"], (out, last)
    assert any("--lr 0" in n for n in out["notes"]), out


@pytest.mark.parametrize("where", list(POSITIONS))
def test_a_refused_run_is_a_json_error(slabs, where):
    r = _run(POSITIONS[where]("train", [slabs, *TINY, "--steps", "0"]))
    assert r.exit_code == 2, r.output
    err = json.loads(r.stdout)["error"]
    assert err["kind"] == "config" and err["flag"] == "--steps", err
