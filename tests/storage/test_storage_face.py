"""packtool.storage is a package whose face (`__init__`) names every public name of its
modules and loads each module on first use: what a URI's text alone says (the CLI's flag
checks, `params.path`, a path's printing) loads no pyarrow; each module owns one rule, under
~400 lines."""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest

import packtool.storage as storage

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


@pytest.mark.parametrize("module", sorted(storage._MODULES))
def test_the_face_names_each_modules_public_names(module):
    mod = importlib.import_module(f"packtool.storage.{module}")
    assert sorted(mod.__all__) == sorted(storage._MODULES[module])
    for name in mod.__all__:
        assert getattr(storage, name) is getattr(mod, name)
    assert (mod.__doc__ or "").strip(), f"packtool.storage.{module} says what it owns"
    assert len(open(mod.__file__).read().splitlines()) <= 400


def test_the_face_holds_every_module_of_the_package():
    here = os.path.dirname(storage.__file__)
    found = {n[:-3] for n in os.listdir(here) if n.endswith(".py") and n != "__init__.py"}
    assert found == set(storage._MODULES)


@pytest.mark.parametrize("names", [["is_uri", "shown", "join_uri", "check_form", "StorageError"],
                                   ["unreached", "reading", "store_failure"]])
def test_a_uris_text_loads_no_pyarrow(names):
    code = (f"import json, sys; from packtool.storage import {', '.join(names)}; import packtool.params; "
            "print(json.dumps('pyarrow' in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) is False


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        storage.nothing_here  # noqa: B018
