"""M6: Ray 2.60 deprecates Ray Data's `ray_remote_args` (removed in 2.64), which packtool's reads
passed (engines/ray_cache.py, ray_write.py): every keyword packtool gives a Ray Data call is one
the installed Ray documents as current, not deprecated. Read from packtool's source (every call of
a Ray Data read or transform, by its name) and the installed Ray's own signatures and docstrings:
no Ray node is started."""
from __future__ import annotations

import ast
import inspect
import os
import re

import pytest

ray_data = pytest.importorskip("ray.data")

ENGINES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                       "packtool", "engines")
# the Ray Data calls packtool makes, by name -> the installed Ray's function
CALLS = {"read_datasource": ray_data.read_datasource, "map_batches": ray_data.Dataset.map_batches,
         "map_groups": __import__("ray.data.grouped_data", fromlist=["x"]).GroupedData.map_groups, "groupby": ray_data.Dataset.groupby}


def _keywords():
    for name in sorted(os.listdir(ENGINES)):
        if name.endswith(".py"):
            tree = ast.parse(open(os.path.join(ENGINES, name)).read())
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in CALLS:
                    for kw in node.keywords:
                        yield name, node.func.attr, kw.arg  # None: a **mapping (task_options: runtime_env)


def _deprecated(fn, arg: str) -> bool:
    doc = inspect.getdoc(fn) or ""
    m = re.search(rf"^\s*{re.escape(arg)}( \(.*?\))?:(.*?)(?=^\s*\w+( \(.*?\))?:|\Z)", doc, re.S | re.M)
    return bool(m) and "deprecated" in m.group(2).lower()


def test_every_keyword_given_to_ray_data_is_current_in_the_installed_ray():
    seen = list(_keywords())
    assert any(call == "read_datasource" for _, call, _ in seen), seen  # the scan finds packtool's reads
    bad = []
    for file, call, arg in seen:
        if arg is None:
            continue
        params = inspect.signature(CALLS[call]).parameters
        takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
        if (arg not in params and not takes_any) or _deprecated(CALLS[call], arg):
            bad.append(f"{file}: {call}({arg}=...)")
    assert not bad, bad


def test_the_task_options_are_named_parameters_of_ray_datas_calls():
    """task_options() (`runtime_env`) is spread into each call as keywords: each a named parameter."""
    for call, fn in CALLS.items():
        if call != "groupby":
            assert "runtime_env" in inspect.signature(fn).parameters or call == "map_groups" and any(
                p.kind is p.VAR_KEYWORD for p in inspect.signature(fn).parameters.values()), call
