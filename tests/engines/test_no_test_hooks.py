"""No test hook ships in the product (issue 23, S36-11): every PACKTOOL_* variable packtool's
source names is one packtool.env documents and checks; `PACKTOOL_RAY_FAIL_ONCE_DIR` let a
user's shell or job spec kill Ray workers and create files through links. The Ray engine's
fault injection lives in tests/engines/ray_faults.py."""
from __future__ import annotations

import pathlib
import re

import pytest

import packtool
import packtool.env

ROOT = pathlib.Path(packtool.__file__).parent
SOURCES = sorted(ROOT.rglob("*.py"))
NAMED = sorted({(m, str(p.relative_to(ROOT))) for p in SOURCES
                for m in re.findall(r"\bPACKTOOL_[A-Z][A-Z0-9_]*", p.read_text())})
DOCUMENTED = set(re.findall(r"^\s+(PACKTOOL_[A-Z0-9_]+)\s", packtool.env.__doc__, re.M))


def test_the_sweep_sees_the_variables():
    assert {"PACKTOOL_DEBUG", "PACKTOOL_CACHE_DIR"} <= {n for n, _ in NAMED}


@pytest.mark.parametrize("name,module", NAMED, ids=[f"{n}@{m}" for n, m in NAMED])
def test_every_packtool_variable_is_documented_in_env(name, module):
    assert name in DOCUMENTED, f"{module} reads {name}, which packtool/env.py neither documents nor checks"


def test_no_fail_once_hook_in_the_ray_writer():
    import packtool.engines.ray_write as w
    assert not [n for n in vars(w) if "fail" in n.lower()], "fault injection belongs in tests/engines/ray_faults.py"
