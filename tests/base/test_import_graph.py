"""The import rules of docs/DESIGN.md ("Stages"), checked on the source tree.

Every `import`/`from ... import` of a packtool module counts, deferred ones inside functions
included (they run too), and importing `packtool.a.b` also runs `packtool/a/__init__.py`.

  - no cycles between modules;
  - a stage imports only the base and earlier stages (tokenize -> planning -> slabs ->
    packing -> verification | inspection); consumers (megatron, engines, cli, ...) come last;
  - nothing outside `engines/` imports `engines/`, except the CLI that dispatches `--engine`;
  - planning never imports printing (the CLI, rich).
"""
from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "packtool")

BASE = {"errors", "notes", "params", "align", "layout", "arrays", "heap", "side", "support_rule", "packers", "progress", "output", "env",
        "__init__"}
# storage/: a location's text (standard library only), resolved to a pyarrow.fs location and every
# request of it, object-store globs, S3's conditional requests and the one-writer lease
BASE |= {"storage"}
BASE |= {"integers"}  # integer arguments (numpy only): every stage and packtool.online check through it
BASE |= {"json_text"}  # JSON a user wrote, a key twice refused: every stage's JSON readers (standard library only)
BASE |= {"manifest_name"}  # the manifest's name: the tokenize stage refuses a cache root in a packed output
BASE |= {"checkpoint_kind"}  # a train --save checkpoint known by its contents: output.relations and megatron ask it
BASE |= {"workers"}  # the one owner of the pools and processes packtool starts (standard library only)
BASE |= {"free_memory"}  # the memory available now (standard library only): every bound, tokenize's whole-file reads too
BASE |= {"pids"}  # a pid read back from a record or a name: one a process can have (standard library only)
BASE |= {"malloc_arenas"}  # glibc's arenas capped under an address-space limit, at import (standard library only)
BASE |= {"threads"}  # a thread the system would not start: packtool's error for it and its words (standard library only)
# output/ owns every write: its file primitives are base (every stage writes through them);
# its pack-folder half reads the slab format, so it sits between slabs and the pack job, with
# output/store.py (the object-store commit protocol).
SUBSTAGE = {"output.folder": 3.5, "output.owned": 3.5, "output.stale": 3.5, "output.store": 3.5,
            "output.store_intents": 3.5}
ORDER = {"tokenize": 1, "planning": 2, "slabs": 3, "packing": 4, "verification": 5,
         "inspection": 5}
CONSUMER = 9  # megatron, engines, cli, and anything else built on the stages


def stage_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def unit_of(module: str) -> str:
    """The stage, or the sub-stage a module of a split package belongs to."""
    return f"{stage_of(module)}@{rank_of(module)}"


def rank_of(module: str) -> float:
    sub = ".".join(module.split(".")[1:3])
    if sub in SUBSTAGE:
        return SUBSTAGE[sub]
    s = stage_of(module)
    return 0 if s in BASE else ORDER.get(s, CONSUMER)


def lazy_face(path: str, package: str) -> dict[str, str]:
    """A package face that loads its modules on first use (packtool.storage: `_MODULES`, module ->
    the names it gives): name -> the module that runs when it is imported through the face."""
    for node in ast.parse(open(path).read(), path).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["_MODULES"]:
            return {name: f"{package}.{module}" for module, names in ast.literal_eval(node.value).items()
                    for name in names}
    return {}


def module_graph(root: str = ROOT) -> dict[str, set[str]]:
    """module -> modules of the same package it imports, parents included."""
    package = os.path.basename(os.path.normpath(root))
    files = {}
    for d, _, names in os.walk(root):
        for n in names:
            if n.endswith(".py"):
                rel = os.path.relpath(os.path.join(d, n), os.path.dirname(root))[:-3].split(os.sep)
                if rel[-1] == "__init__":
                    rel = rel[:-1]
                files[".".join(rel)] = os.path.join(d, n)
    faces = {mod: lazy_face(path, mod) for mod, path in files.items() if path.endswith("__init__.py")}
    graph = {}
    for mod, path in files.items():
        tree = ast.parse(open(path).read(), path)
        deps = set()
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                names += [faces[node.module][a.name] for a in node.names if a.name in faces.get(node.module, {})]
            elif isinstance(node, ast.ImportFrom) and node.level:
                raise AssertionError(f"{path}:{node.lineno}: relative import; packtool uses absolute imports")
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                if name.split(".")[0] != package:
                    continue
                parts = name.split(".")
                for k in range(2, len(parts) + 1):  # parent packages run first
                    cand = ".".join(parts[:k])
                    if cand in files and cand != mod and not mod.startswith(cand + "."):
                        deps.add(cand)
        graph[mod] = deps
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    color: dict[str, int] = {}
    stack: list[str] = []

    def visit(u):
        color[u] = 1
        stack.append(u)
        for v in sorted(graph.get(u, ())):
            if color.get(v) == 1:
                return stack[stack.index(v):] + [v]
            if not color.get(v):
                found = visit(v)
                if found:
                    return found
        stack.pop()
        color[u] = 2
        return None

    for m in sorted(graph):
        if not color.get(m):
            found = visit(m)
            if found:
                return found
    return None


def rule_breaks(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for m, deps in sorted(graph.items()):
        for d in sorted(deps):
            sm, sd = stage_of(m), stage_of(d)
            if sd == "engines" and sm not in ("engines", "cli"):
                out.append(f"{m} imports {d}: only engines/ (and the CLI's --engine) may")
            elif sm == "planning" and sd == "cli":
                out.append(f"{m} imports {d}: planning never imports printing")
            elif unit_of(m) != unit_of(d) and rank_of(m) < CONSUMER and rank_of(d) >= rank_of(m) and rank_of(d) > 0:
                out.append(f"{m} ({sm}) imports {d} ({sd}): imports run from later stages to earlier ones")
    return out


def test_the_tree_has_no_cycle():
    assert find_cycle(module_graph()) is None


def test_the_kernels_import_only_kernels_the_error_type_and_env():
    # packtool/kernels/ is a leaf (torch + triton): the trainer, online and hf call it; it asks
    # nothing of the stages but packtool's error type and its environment variables (env.py),
    # so a kernel test loads no pyarrow or numba
    graph = module_graph()
    outside = {m: sorted(d for d in deps if not d.startswith("packtool.kernels") and d not in ("packtool.errors", "packtool.env"))
               for m, deps in graph.items() if m.startswith("packtool.kernels")}
    assert len(outside) > 10 and all(not v for v in outside.values()), outside


def test_packtool_installs_one_top_level_name():
    # a top-level `kernels` shadowed Hugging Face's package of that name (transformers >= 5.25)
    text = open(os.path.join(os.path.dirname(ROOT), "pyproject.toml")).read()
    assert 'include = ["packtool*"]' in text
    assert not os.path.exists(os.path.join(os.path.dirname(ROOT), "kernels"))


def test_the_installed_packtool_claims_no_top_level_kernels():
    # an editable install made before the move kept mapping `kernels` to packtool (its finder and
    # top_level.txt), so metadata lookups (transformers' among them) took packtool for its owner
    import importlib.metadata as md
    owners = md.packages_distributions().get("kernels", [])
    assert "packtool" not in owners, "this environment's packtool install predates packtool/kernels/: " \
        "run `pip install -e .` (or `make install`) again"


def test_the_tree_follows_the_stage_rules():
    assert rule_breaks(module_graph()) == []


def test_planning_never_loads_printing_libraries():
    for m in (m for m in module_graph() if stage_of(m) == "planning"):
        mod_path = os.path.join(os.path.dirname(ROOT), *m.split(".")) + ".py"
        if not os.path.exists(mod_path):
            mod_path = os.path.join(os.path.dirname(ROOT), *m.split("."), "__init__.py")
        tree = ast.parse(open(mod_path).read())
        roots = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        roots |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert "rich" not in roots and "typer" not in roots, m


@pytest.mark.parametrize("graph,expect", [
    ({"packtool.planning.core": {"packtool.slabs.format"}, "packtool.slabs.format": set()}, "later stages"),
    ({"packtool.tokenize.cache": {"packtool.engines.ray_plan"}, "packtool.engines.ray_plan": set()}, "only engines/"),
    ({"packtool.planning.sharded": {"packtool.cli.printing"}, "packtool.cli.printing": set()}, "never imports printing"),
    ({"packtool.verification.run": {"packtool.inspection.report"}, "packtool.inspection.report": set()}, "later stages"),
    ({"packtool.output.files": {"packtool.output.folder"}, "packtool.output.folder": set()}, "later stages"),
    ({"packtool.slabs.format": {"packtool.output.owned"}, "packtool.output.owned": set()}, "later stages"),
])
def test_the_checker_catches_each_kind_of_break(graph, expect):
    breaks = rule_breaks(graph)
    assert len(breaks) == 1 and expect in breaks[0], breaks


def test_the_checker_catches_a_cycle():
    g = {"packtool.slabs.writer": {"packtool.slabs.format"}, "packtool.slabs.format": {"packtool.slabs.gather"},
         "packtool.slabs.gather": {"packtool.slabs.writer"}}
    cyc = find_cycle(g)
    assert cyc[0] == cyc[-1] and set(cyc) == set(g) and len(cyc) == 4
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_allowed_imports_pass():
    g = {"packtool.slabs.writer": {"packtool.planning.core", "packtool.align", "packtool.tokenize.flat_tokens"},
         "packtool.cli.app": {"packtool.engines", "packtool.packing"}, "packtool.megatron.dataset": {"packtool.slabs"},
         "packtool.tokenize.cache": {"packtool.output.files"}, "packtool.output.folder": {"packtool.slabs.format"}}
    assert rule_breaks(g) == []
