"""RB-3: FORMAT.md and slabs/schema.py said "packtool reads both versions", and the reader took
`schema_version` 1, but no version 1 output as pack wrote it (before 2026-12-01: no `side_columns`
key, no `stats.side_nan` / `side_inf`, no `input.tokenize` side/support columns) was read by
anything: verify, SlabDataset, inspect and the megatron dataset said "stats.side_nan is absent ...
the manifest is edited or damaged", and with today's stats the standalone reader refused the absent
`side_columns` that verify and packtool's readers took. One decision now, at the format's owner
(slabs.format.OLD_VERSION) and in FORMAT.md alike: a version 1 output is refused by every reader in
one line naming the version and the fix, verify too (a manifest problem, exit 1)."""
from __future__ import annotations

import pytest
from slab_support import format_reader, read_manifest, save_manifest, write_pack

from packtool.align import Alignment
from packtool.errors import PacktoolError


def _as_pack_wrote_it(m):
    """A version 1 manifest as packtool wrote it (a real one, packed at 584b82d^, differs from
    today's in these keys alone)."""
    del m["side_columns"], m["stats"]["side_nan"], m["stats"]["side_inf"]
    for key in ("side_columns", "support_columns"):
        ((m.get("input") or {}).get("tokenize") or {}).pop(key, None)


def _with_todays_stats(m):
    del m["side_columns"]


FORMS = {"as pack wrote it": _as_pack_wrote_it, "with today's stats": _with_todays_stats}


def _megatron(out):
    pytest.importorskip("torch")
    from packtool.megatron.dataset import PackedSlabDataset
    return next(PackedSlabDataset(out).steps())


def _reader(out):
    from packtool.slabs.format import SlabManifest
    return SlabManifest.read(out)


CONSUMERS = {"inspect": lambda o: __import__("packtool").inspect(o), "reader": _reader,
             "hf.SlabDataset": lambda o: pytest.importorskip("packtool.hf").SlabDataset(o), "megatron": _megatron,
             "FORMAT.md reader": lambda o: format_reader().open_output(o)}


@pytest.fixture(params=list(FORMS))
def v1(request, tmp_path):
    out = write_pack(str(tmp_path), [40, 70, 90, 30], Alignment(capacity=128))[0]
    m = read_manifest(out)
    m["schema_version"] = 1
    FORMS[request.param](m)
    save_manifest(out, m)
    return out


@pytest.mark.parametrize("consumer", CONSUMERS)
def test_every_reader_refuses_a_version_1_output_in_one_line(v1, consumer):
    with pytest.raises((PacktoolError, ValueError)) as e:
        CONSUMERS[consumer](v1)
    msg = str(e.value)
    assert "schema_version" in msg and "1" in msg and "pack the data again" in msg and "\n" not in msg, msg
    assert "edited" not in msg and "absent" not in msg, msg  # the version, not a field it lacks


def test_verify_says_it_as_one_manifest_problem_exit_1(v1):
    from packtool.verification import verify
    from packtool.cli.app import app
    r = verify(v1, workers=1)
    assert not r.ok and [p.check for p in r.problems] == ["manifest"], r.problems
    assert "schema_version 1" in r.problems[0].message and "pack the data again" in r.problems[0].message
    from typer.testing import CliRunner
    res = CliRunner().invoke(app, ["verify", v1])
    assert res.exit_code == 1, res.output


@pytest.mark.parametrize("replacing", [False, True], ids=["a reader", "a writer's read"])
@pytest.mark.parametrize("version", [1.0, True, 2.0, "2"])
def test_a_schema_version_of_another_json_type_is_refused(tmp_path, version, replacing):
    """R2B-1: the version is an integer; 1.0 and true compared equal to 1 once version 1 was taken
    by the writers' read (a1068ad), and 2.0 to 2 always."""
    import json

    from packtool.slabs.format import FormatError, parse_manifest
    out = write_pack(str(tmp_path), [40, 70], Alignment(capacity=128))[0]
    m = read_manifest(out)
    m["schema_version"] = version
    with pytest.raises(FormatError, match="schema_version"):
        parse_manifest(json.dumps(m).encode(), "m.json", replacing=replacing)
