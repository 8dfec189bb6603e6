"""packtool/side.py: what a side column is, and every way one is refused."""
from __future__ import annotations

import numpy as np
import pytest

from packtool.errors import PacktoolFormatError, PacktoolInputError
from packtool.side import (RESERVED, SideColumn, check_side_columns, parse_names, side_columns_from_manifest,
                           side_columns_to_manifest)


def test_defaults_and_round_trip():
    a = SideColumn("old_logprobs", "float32")
    b = SideColumn("support", "int32", width=20, kind="support")
    assert (a.width, a.fill, a.kind, b.fill) == (1, 0.0, "values", -1)
    assert a.filled(3).shape == (3,) and b.filled(2).shape == (2, 20) and b.filled(2).dtype == np.int32
    assert side_columns_from_manifest(side_columns_to_manifest([a, b])) == (a, b)
    assert side_columns_from_manifest(None) == () == side_columns_from_manifest([])


@pytest.mark.parametrize("kw", [
    dict(name="input_ids", dtype="float32"), dict(name="labels", dtype="float32"),
    dict(name="1x", dtype="float32"), dict(name="a b", dtype="float32"), dict(name="", dtype="float32"),
    dict(name="x", dtype="float16"), dict(name="x", dtype="uint8"), dict(name="x", dtype="float32", width=0),
    dict(name="x", dtype="float32", width=True), dict(name="x", dtype="int32", fill=0.5),
    dict(name="x", dtype="int32", fill=2**40), dict(name="x", dtype="float32", fill=float("nan")),
    dict(name="x", dtype="float32", fill="0"), dict(name="x", dtype="float32", kind="weights"),
    dict(name="x", dtype="float32", kind="support"), dict(name="x", dtype="int32", fill=0, kind="support"),
])
def test_refused(kw):
    with pytest.raises(PacktoolInputError):
        SideColumn(**kw)


def test_names():
    assert parse_names(" a, b ,c") == ("a", "b", "c") and parse_names(None) == ()
    for bad in ("a,a", "a,input_ids", "a,b-c"):
        with pytest.raises(PacktoolInputError):
            parse_names(bad)
    with pytest.raises(PacktoolInputError, match="twice"):
        check_side_columns([SideColumn("a", "float32"), SideColumn("a", "int32")])


@pytest.mark.parametrize("entries", [{"name": "a"}, [1], [{"name": "a", "dtype": "float16"}],
                                     [{"name": "a", "dtype": "int32"}, {"name": "a", "dtype": "int32"}]])
def test_manifest_damage_is_a_format_error(entries):
    with pytest.raises(PacktoolFormatError):
        side_columns_from_manifest(entries)


def test_reserved_covers_the_slab_schema():
    from packtool.slabs.schema import SCHEMA
    assert set(SCHEMA.names) <= RESERVED
