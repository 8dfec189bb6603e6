"""No undefined name in packtool/ (pyflakes F821, F822, F823), checked with the standard library
only: a name a line reads that nothing binds is a NameError on a path tests may never take (an
error branch: side_values once raised one instead of its one-line error).

  - undefined (F821): a name read in any scope that no enclosing function, the module or
    builtins binds (symtable resolves the scopes), or read at module level before any binding;
  - in `__all__` (F822): a listed name the module never binds (a module `__getattr__` may
    supply only the names of its own lazy table);
  - before assignment (F823): a function's local read before the function first binds it.

The tests at the end hold the checker to each kind on a small source, so it cannot pass empty.
"""
from __future__ import annotations

import ast
import builtins
import os
import symtable

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "packtool")
# names every module has without binding them
IMPLICIT = set(dir(builtins)) | {"__file__", "__name__", "__doc__", "__spec__", "__loader__", "__package__",
                                 "__path__", "__builtins__", "__annotations__", "__dict__", "__class__"}
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp, ast.SetComp,
          ast.DictComp, ast.GeneratorExp)


def _sources() -> list[str]:
    out = []
    for d, _, files in os.walk(ROOT):
        out += [os.path.join(d, f) for f in files if f.endswith(".py")]
    return sorted(out)


def _bound_at_module(table: symtable.SymbolTable) -> set[str]:
    return {s.get_name() for s in table.get_symbols() if s.is_assigned() or s.is_imported()
            or s.is_namespace()}


def _unresolved(table: symtable.SymbolTable, module: set[str]) -> list[tuple[str, str]]:
    """(scope, name) of every name read in `table` or its children that resolves to the module's
    globals (or builtins) but that the module never binds."""
    out = []
    for s in table.get_symbols():
        if not s.is_referenced():
            continue
        name = s.get_name()
        outward = s.is_global() or (table.get_type() == "module")
        if outward and name not in module and name not in IMPLICIT:
            out.append((table.get_name(), name))
    for child in table.get_children():
        out += _unresolved(child, module)
    return out


class _Order(ast.NodeVisitor):
    """Within one scope's own code (not nested scopes' bodies), each name's first read and first
    binding, as positions in the order they run: a binding by an assignment counts once its
    whole statement ran (`x = f(x)` reads x first)."""

    def __init__(self):
        self.first_read: dict[str, tuple[int, int]] = {}
        self.first_bind: dict[str, tuple[int, int]] = {}

    def _read(self, name, node):
        self.first_read.setdefault(name, (node.lineno, node.col_offset))

    def _bind(self, name, at):
        if name not in self.first_bind or at < self.first_bind[name]:
            self.first_bind[name] = at

    def body(self, stmts):
        for st in stmts:
            self.visit(st)
        return self

    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Load):
            self._read(node.id, node)
        else:  # Store/Del: a binding as the enclosing statement ends (see visit_* below)
            self._bind(node.id, self._end)

    def generic_visit(self, node):
        if isinstance(node, ast.stmt):
            prev, self._end = getattr(self, "_end", (0, 0)), (node.end_lineno, node.end_col_offset)
            if isinstance(node, (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith, ast.While, ast.If, ast.Try,
                                 ast.Match)):
                self._end = (node.lineno, node.col_offset)  # their targets bind before their bodies run
            super().generic_visit(node)
            self._end = prev
        else:
            super().generic_visit(node)

    def visit_AugAssign(self, node):
        if isinstance(node.target, ast.Name):
            self._read(node.target.id, node.target)
        self.generic_visit(node)

    def _scope(self, node, name):
        """A nested scope: its decorators, defaults and bases run here, its body later."""
        for sub in [*getattr(node, "decorator_list", []), *getattr(node, "bases", []),
                    *(k.value for k in getattr(node, "keywords", []))]:
            self.visit(sub)
        a = getattr(node, "args", None)
        if isinstance(a, ast.arguments):
            for d in [*a.defaults, *(d for d in a.kw_defaults if d is not None)]:
                self.visit(d)
        if name:
            self._bind(name, (node.lineno, node.col_offset))

    def visit_FunctionDef(self, node):
        self._scope(node, node.name)

    visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef

    def visit_Lambda(self, node):
        self._scope(node, None)

    def _comprehension(self, node):  # only the first iterable runs in this scope
        self.visit(node.generators[0].iter)

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension

    def _import(self, node):
        for a in node.names:
            if a.name != "*":
                self._bind((a.asname or a.name).split(".")[0], (node.lineno, node.col_offset))

    visit_Import = visit_ImportFrom = _import

    def visit_ExceptHandler(self, node):
        if node.name:
            self._bind(node.name, (node.lineno, node.col_offset))
        self.generic_visit(node)

    def visit_Global(self, node):
        for n in node.names:
            self._bind(n, (0, 0))  # bound elsewhere: not this scope's order

    visit_Nonlocal = visit_Global

    def visit_NamedExpr(self, node):
        self.visit(node.value)
        self._bind(node.target.id, (node.lineno, node.col_offset))

    def visit_arg(self, node):
        pass


def _read_before_bound(tree: ast.Module, module: set[str]) -> list[tuple[str, str]]:
    """(scope, name): a module-level read before the module binds the name (F821), and a
    function's local read before the function binds it (F823)."""
    out = []
    top = _Order().body(tree.body)
    out += [("top", n) for n, at in top.first_read.items()
            if n in top.first_bind and at < top.first_bind[n] and n not in IMPLICIT]
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        order = _Order().body(fn.body)
        params = {a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs,
                                  *(x for x in (fn.args.vararg, fn.args.kwarg) if x)]}
        out += [(fn.name, n) for n, at in order.first_read.items()
                if n in order.first_bind and at < order.first_bind[n] and n not in params
                and order.first_bind[n] != (0, 0)]
    return out


def _listed(node) -> list[str]:
    """The strings of `[...]`, `(...)`, `a + b` and calls over them (`sorted([...])`)."""
    if isinstance(node, (ast.List, ast.Tuple)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    if isinstance(node, ast.BinOp):
        return _listed(node.left) + _listed(node.right)
    if isinstance(node, ast.Call):
        return [n for a in node.args for n in _listed(a)]
    return []


def _all_names(tree: ast.Module) -> list[str] | None:
    for st in tree.body:
        if isinstance(st, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in st.targets):
            return _listed(st.value)
    return None


def _lazy_names(tree: ast.Module) -> set[str]:
    """What a module `__getattr__` may supply: the keys of a dict literal the module binds at
    top level (its lazy table), and the strings its `__getattr__` compares the name with."""
    out = set()
    for st in tree.body:
        if isinstance(st, (ast.Assign, ast.AnnAssign)) and isinstance(st.value, ast.Dict):
            out |= {k.value for k in st.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
        if isinstance(st, ast.FunctionDef) and st.name == "__getattr__":
            for c in ast.walk(st):
                if isinstance(c, ast.Compare):
                    out |= {n.value for n in [c.left, *c.comparators]
                            if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    return out


def problems(source: str, path: str = "<src>") -> list[str]:
    tree = ast.parse(source, path)
    if any(isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names) for n in tree.body):
        return [f"{path}: `import *` hides which names exist"]
    table = symtable.symtable(source, path, "exec")
    module = _bound_at_module(table)
    out = [f"{path}: undefined name {n!r} in {s}" for s, n in _unresolved(table, module)]
    out += [f"{path}: {n!r} read before it is assigned in {s}" for s, n in _read_before_bound(tree, module)]
    listed = _all_names(tree)
    if listed is not None:
        lazy = _lazy_names(tree) if "__getattr__" in module else set()
        out += [f"{path}: {n!r} in __all__ is not defined" for n in listed if n not in module and n not in lazy]
    return out


def test_no_undefined_name_in_packtool():
    found = []
    for path in _sources():
        with open(path, encoding="utf-8") as f:
            found += problems(f.read(), os.path.relpath(path, os.path.dirname(ROOT)))
    assert not found, "\n".join(found)


KINDS = {
    "undefined in an error branch": ("def f(c):\n    if c:\n        raise ValueError(f'{name}')\n", "'name'"),
    "undefined in a method": ("class A:\n    def m(self):\n        return missing + 1\n", "'missing'"),
    "undefined in a comprehension": ("def f(xs):\n    return [y for x in xs]\n", "'y'"),
    "undefined in a lambda default": ("f = lambda a=nope: a\n", "'nope'"),
    "undefined in a class body": ("class A:\n    x = absent\n", "'absent'"),
    "module read before def": ("f()\n\ndef f():\n    pass\n", "'f' read before"),
    "in __all__": ("__all__ = ['a', 'gone']\na = 1\n", "'gone' in __all__"),
    "local before assignment": ("x = 1\n\ndef f():\n    y = x\n    x = 2\n    return y\n", "'x' read before"),
    "augmented unbound local": ("n = 0\n\ndef f():\n    n += 1\n", "'n' read before"),
    "self-referencing assignment": ("def f():\n    v = v + 1\n    return v\n", "'v' read before"),
}
FINE = [
    "import os\n\ndef f():\n    return os.sep, len, __file__\n",
    "def f():\n    x = 1\n    def g():\n        return x\n    return g\n",
    "def f(a, *b, c=1, **d):\n    e = a\n    return e, b, c, d\n",
    "try:\n    import zstd\nexcept ImportError:\n    zstd = None\n",
    "def f(xs):\n    for i in xs:\n        y = i\n    return [z for z in xs if z], y\n",
    "G = 0\n\ndef f():\n    global G\n    G += 1\n",
    "import importlib\n_LAZY = {'x': 'm'}\n__all__ = ['x']\n\ndef __getattr__(n):\n"
    "    return importlib.import_module(_LAZY[n])\n",
    "import importlib\n__all__ = sorted(['y', *(k for k in ('a', 'b') if k)])\n\ndef __getattr__(n):\n"
    "    if n == 'y':\n        return 1\n    raise AttributeError(n)\n",
    "def f(p):\n    if (m := p) > 1:\n        return m\n",
    "class A:\n    def m(self):\n        return __class__, A\n",
]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_check_finds_each_kind(kind):
    src, words = KINDS[kind]
    found = problems(src)
    assert any(words in p for p in found), (kind, found)


@pytest.mark.parametrize("src", FINE)
def test_the_check_passes_bound_names(src):
    assert problems(src) == []
