"""The suite's own scheduling rules (tests/conftest.py): the long tests first, and Ray held by one
group at a time. Stop 48's rehearsal found both broken: a second `pytest_collection_modifyitems`
in conftest hid the first (the long-first order never applied), and the teardown guard shut down
tests/storage/test_store_ray_nodes.py's cluster connection between its tests and failed them,
before their fixtures were torn down."""
from __future__ import annotations

import sys
import types

import pytest

import conftest


class _Item:
    def __init__(self, nodeid, *groups):
        self.nodeid = nodeid
        self._marks = [pytest.mark.xdist_group(g).mark for g in groups]

    def iter_markers(self, name):
        return [m for m in self._marks if m.name == name]


@pytest.fixture
def fake_ray(monkeypatch):
    """A stand-in `ray` module that is up until shut down."""
    ray = types.SimpleNamespace(up=True, shutdowns=0)
    ray.is_initialized = lambda: ray.up

    def shutdown():
        ray.up, ray.shutdowns = False, ray.shutdowns + 1
    ray.shutdown = shutdown
    monkeypatch.setitem(sys.modules, "ray", ray)
    return ray


def _teardown(item, nextitem, raised: BaseException | None = None):
    """Run the conftest wrapper around a teardown that passed, or raised `raised`; the failure
    it raises, if any."""
    gen = conftest.pytest_runtest_teardown(item, nextitem)
    next(gen)
    try:
        gen.send(None) if raised is None else gen.throw(raised)
    except StopIteration:
        return None
    except (pytest.fail.Exception, RuntimeError) as e:
        return str(e)


NODES, LOCAL, PLAIN = _Item("a@ray_nodes", "ray_nodes"), _Item("b@local_ray", "local_ray"), _Item("c")
CASES = {  # (test, next test): (Ray shut down after it, the test failed)
    "cluster test before another of its module": (NODES, _Item("d", "ray_nodes"), False, False),
    "cluster test before a local-Ray test": (NODES, LOCAL, True, False),
    "local-Ray test before another": (LOCAL, _Item("e", "local_ray"), False, False),
    "local-Ray test last": (LOCAL, None, True, False),
    "local-Ray test before a plain one": (LOCAL, PLAIN, True, False),
    "plain test that left Ray up": (PLAIN, None, True, True),
    "plain test that left Ray up before a local-Ray test": (PLAIN, LOCAL, True, True),
}


@pytest.mark.parametrize("case", CASES)
def test_ray_is_held_by_one_group_at_a_time(fake_ray, case):
    item, nextitem, shut, failed = CASES[case]
    said = _teardown(item, nextitem)
    assert (fake_ray.shutdowns == 1) is shut
    assert (said is not None) is failed
    if failed:
        assert "without LOCAL_RAY_GROUP" in said


# RB-7: a teardown that raised (the ray_nodes cluster fixture's, at its module's last test) skipped
# the shutdown: Ray stayed up, and the next test outside the group was failed for starting it
@pytest.mark.parametrize("case", [c for c in CASES if CASES[c][2]])
def test_a_teardown_that_raised_still_gets_the_shutdown(fake_ray, case):
    item, nextitem, _, _ = CASES[case]
    said = _teardown(item, nextitem, RuntimeError("the cluster's teardown failed"))
    assert fake_ray.shutdowns == 1 and said == "the cluster's teardown failed", said


def test_no_ray_is_no_word(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    assert _teardown(PLAIN, None) is None


def test_the_long_tests_are_handed_out_first():
    items = [_Item("tests/base/test_x.py::t"), _Item(f"{conftest.LONG_FIRST[1]}::t"),
             _Item(f"{conftest.LONG_FIRST[0]}::t")]
    config = types.SimpleNamespace(option=types.SimpleNamespace(loadgroup=False))
    conftest.pytest_collection_modifyitems(config, items)
    assert [i.nodeid.split("::")[0] for i in items] == [*conftest.LONG_FIRST[:2], "tests/base/test_x.py"]


def test_one_collection_hook_in_conftest():
    """A second definition of a hook in one module replaces the first, with no word."""
    import ast
    tree = ast.parse(open(conftest.__file__).read())
    names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("pytest_")]
    assert len(names) == len(set(names)), names
