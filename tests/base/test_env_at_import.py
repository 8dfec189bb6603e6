"""No test module changes the environment when it is imported: pytest imports every module of a run
into one process before any test, so a module-level `os.environ[...] = ...` leaks into every other
module of that process. Stop 43: one module setting TRITON_INTERPRET=1 at import made the GPU
suite's later Triton kernels run interpreted (67 failures on an H200). tests/conftest.py is the one
place that sets the process's environment, once, before any test module is imported."""
from __future__ import annotations

import ast
import os

import pytest

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALLOWED = {os.path.join(TESTS, "conftest.py")}
_WRITES = {"setdefault", "update", "pop", "popitem", "clear", "__setitem__", "__delitem__"}


def _is_environ(node) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ" and isinstance(node.value, ast.Name) \
        and node.value.id == "os"


def _writes_env(stmt) -> bool:
    """Whether a statement run at import writes os.environ (or os.putenv/unsetenv)."""
    for node in ast.walk(stmt):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            if any(isinstance(t, ast.Subscript) and _is_environ(t.value) for t in targets):
                return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            f = node.func
            if (f.attr in _WRITES and _is_environ(f.value)) or (
                    f.attr in ("putenv", "unsetenv") and isinstance(f.value, ast.Name) and f.value.id == "os"):
                return True
    return False


def module_level_env_writes(source: str) -> list[int]:
    """Line numbers of statements that write the environment when the module is imported: top-level
    ones, those in top-level if/try/with/for blocks and class bodies, never inside a function."""
    found, todo = [], list(ast.parse(source).body)
    while todo:
        stmt = todo.pop()
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue  # runs when called; a class body runs at import, so it is walked
        nested = [b for f in ("body", "orelse", "finalbody", "handlers") for b in getattr(stmt, f, [])]
        if nested:
            todo.extend(nested)
            if isinstance(stmt, ast.ExceptHandler):
                continue
            head = [getattr(stmt, k) for k in ("test", "iter", "items") if getattr(stmt, k, None) is not None]
            if any(_writes_env(h) for h in head if isinstance(h, ast.AST)):
                found.append(stmt.lineno)
        elif _writes_env(stmt):
            found.append(stmt.lineno)
    return sorted(found)


def _modules():
    for root, _, files in os.walk(TESTS):
        for name in sorted(files):
            path = os.path.join(root, name)
            if name.endswith(".py") and path not in ALLOWED:
                yield path


def test_no_test_module_writes_the_environment_at_import():
    bad = []
    for path in _modules():
        with open(path, encoding="utf-8") as f:
            lines = module_level_env_writes(f.read())
        bad += [f"{os.path.relpath(path, TESTS)}:{n}" for n in lines]
    assert not bad, f"environment written at import (use monkeypatch, or tests/conftest.py): {bad}"


@pytest.mark.parametrize("source, lines", [
    ('import os\nos.environ["X"] = "1"\n', [2]),
    ('import os\nos.environ.setdefault("X", "1")\n', [2]),
    ('import os\nif True:\n    os.environ.update(X="1")\n', [3]),
    ('import os\ntry:\n    pass\nfinally:\n    del os.environ["X"]\n', [5]),
    ('import os\nos.putenv("X", "1")\n', [2]),
    ('import os\ndef f():\n    os.environ["X"] = "1"\n', []),
    ('import os\nclass C:\n    os.environ["X"] = "1"\n', [3]),
    ('import os\nclass C:\n    def f(self):\n        os.environ["X"] = "1"\n', []),
    ('import os\nx = os.environ.get("X")\n', []),
])
def test_the_scan_finds_writes_at_import_and_only_those(source, lines):
    assert module_level_env_writes(source) == lines
