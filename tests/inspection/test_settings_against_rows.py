"""inspect holds the settings a plan file (or an output's manifest) records to the rows they
describe (S42-9): a split plan whose `packing.overflow` was edited to 'error' was reported as
"0 split" (672 rows cut and 672 targets lost shown as none), and a lowered capacity was blamed
on flags that --plan holds to the record. Every setting the rows can contradict, under every
policy whose rows show it (planning.core.segments_off_policy, the overflow rule's owner): a row
cut into chunks under any policy but split, a sequence placed alone under any but singleton,
chunks of another U (capacity raised or lowered) under split. One line naming the file, the
row or slab and "edited", exit 2 on the command line; the clean files still read."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest
from slab_support import read_manifest, resign_changes, save_manifest, write_pack
from typer.testing import CliRunner

from packtool.align import Alignment
from packtool.cli.app import app
from packtool.errors import PacktoolError
from packtool.inspection.packed import inspect_packed
from packtool.inspection.planned import inspect_plan_file
from packtool.planning.core import PackingConfig, plan
from packtool.planning.plan_file import META_KEY, write_plan

LENGTHS = np.random.default_rng(3).integers(5, 400, 150)
ALIGN = Alignment(cp=2, capacity=256)


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    root = tmp_path_factory.mktemp("plans")
    out = {}
    for policy in ("split", "singleton", "truncate"):
        out[policy] = str(root / f"{policy}.parquet")
        write_plan(plan(LENGTHS, ALIGN, PackingConfig(overflow=policy)), out[policy])
        inspect_plan_file(out[policy], what_if=False)  # the clean file reads
    return out


def _settings(path, out, **edit):
    t = pq.read_table(path)
    meta = json.loads(t.schema.metadata[META_KEY])
    for k, v in edit.items():
        (meta["alignment"] if k in ("capacity", "cp", "tp") else meta["packing"])[k] = v
    pq.write_table(t.replace_schema_metadata({**t.schema.metadata, META_KEY: json.dumps(meta).encode()}), out)
    return out


# made under -> (setting edited, words the refusal holds)
EDITS = {
    "split as error": ("split", {"overflow": "error"}, ["is chunk 1 of source row", "overflow 'error' cuts no row"]),
    "split as singleton": ("split", {"overflow": "singleton"}, ["overflow 'singleton' cuts no row"]),
    "split as truncate": ("split", {"overflow": "truncate"}, ["overflow 'truncate' cuts no row"]),
    "singleton as error": ("singleton", {"overflow": "error"}, ["placed alone", "overflow 'error' never makes"]),
    "singleton as split": ("singleton", {"overflow": "split"}, ["placed alone", "overflow 'split' never makes"]),
    "singleton as truncate": ("singleton", {"overflow": "truncate"}, ["overflow 'truncate' never makes"]),
    "split, capacity raised": ("split", {"capacity": 512}, ["chunks of U=512 tokens", "with 256 tokens"]),
    "split, capacity lowered": ("split", {"capacity": 128}, ["more than U=128 of C=128 (the file's settings)"]),
    "truncate, capacity lowered": ("truncate", {"capacity": 128}, ["more than U=128", "(the file's settings)"]),
}


@pytest.mark.parametrize("case", EDITS)
def test_settings_edited_against_the_rows_are_refused(plans, tmp_path, case):
    made, edit, words = EDITS[case]
    out = _settings(plans[made], str(tmp_path / "edited.parquet"), **edit)
    with pytest.raises(PacktoolError) as e:
        inspect_plan_file(out, what_if=False)
    msg = str(e.value)
    assert msg.startswith(f"{out}: ") and "\n" not in msg, msg
    for w in [*words, "the file was edited or damaged: write it again with `packtool plan --output`"]:
        assert w in msg, msg
    assert "pass the same" not in msg, msg


def test_the_findings_example_on_the_command_line(plans, tmp_path):
    out = _settings(plans["split"], str(tmp_path / "plan_ovf.parquet"), overflow="error")
    before = open(out, "rb").read()
    r = CliRunner().invoke(app, ["inspect", "--plan", out, "--no-what-if", "--json"])
    err = json.loads(r.stdout)["error"]
    assert r.exit_code == 2 and err["flag"] == "--plan" and "overflow 'error' cuts no row" in err["message"], r.stdout
    r = CliRunner().invoke(app, ["inspect", "--plan", out, "--no-what-if"])
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith(f"error: {out}: segment row "), r.stderr
    assert "Traceback" not in r.output and open(out, "rb").read() == before


def test_an_older_plan_read_with_another_overflow_names_the_flag(plans, tmp_path):
    """A plan file without its settings (written before they were recorded) is read with the
    flags given: one that disagrees with the rows is the flag's, not an edit."""
    t = pq.read_table(plans["split"])
    out = str(tmp_path / "old.parquet")
    pq.write_table(t.replace_schema_metadata({k: v for k, v in t.schema.metadata.items() if k != META_KEY}), out)
    inspect_plan_file(out, ALIGN, PackingConfig(overflow="split"), what_if=False)
    with pytest.raises(PacktoolError, match="overflow 'error' cuts no row.*pass the same overflow"):
        inspect_plan_file(out, ALIGN, PackingConfig(overflow="error"), what_if=False)


# the same edit of a packed output's manifest, its figures edited to agree with the policy (each
# figure a policy cannot produce at 0, so only the slabs can tell): the slab reader's checks
# (check_rows, which inspect runs first) hold each slab to the policy already
PACK_LENGTHS = np.random.default_rng(5).integers(1, 40, 60) * 8 - 3
PACK_LENGTHS[[3, 17, 40]] = [300, 420, 290]  # over U=256


@pytest.fixture(scope="module")
def packs(tmp_path_factory):
    root = tmp_path_factory.mktemp("packs")
    return {p: write_pack(str(root / p), PACK_LENGTHS, Alignment(capacity=256), PackingConfig("bfd", overflow=p))[0]
            for p in ("split", "singleton")}


@pytest.mark.parametrize("made,said", [("split", "error"), ("split", "truncate"), ("singleton", "error"),
                                       ("singleton", "split")])
def test_an_outputs_policy_edited_with_its_figures_is_refused(packs, tmp_path, made, said):
    out = str(tmp_path / "p")
    shutil.copytree(packs[made], out)
    inspect_packed(out, what_if=False)
    man = read_manifest(out)
    man["config"]["packing"]["overflow"] = said
    man["stats"]["overflow"] = {k: (said if k == "policy" else 0) for k in man["stats"]["overflow"]}
    resign_changes(man)
    save_manifest(out, man)
    with pytest.raises(PacktoolError) as e:
        inspect_packed(out, what_if=False)
    msg = str(e.value)
    assert "\n" not in msg and f"overflow policy {said!r}" in msg and "damaged or edited" in msg, msg
    assert ("is cut into chunks" if made == "split" else "marked singleton") in msg, msg
