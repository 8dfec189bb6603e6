"""Stage 2, plan: sequence lengths in, a placement of every segment in a slab out.

`core` (PackingConfig, the overflow policies, `plan`), `bins` and `sharded` (row shards
planned apart and merged, for inputs larger than memory), `spill` (the sharded plan with
its placements on disk), `slabs` (per-slab specs and the routing of segments to output
shards), `summary` (padding figures and the plan summary). Asks `align` and `layout` for
every footprint; never imports printing or later stages (docs/DESIGN.md).
"""
import importlib

# Names load on first use: `packtool.planning.core` (what a manifest's settings are checked
# against) is imported by every reader of packed output, which plans nothing; the sharded
# planner and the packers' numba kernels stay unloaded there
_EXPORTS = {
    "plan": "core", "PackingConfig": "core", "Plan": "core", "PlanError": "core", "OverflowStats": "core",
    "load_lengths": "lengths", "write_plan": "plan_file", "ShardedPlan": "sharded", "plan_sharded": "sharded",
    "PaddingStats": "summary", "PlanSummary": "summary", "padding_stats": "summary", "plan_summary": "summary",
}

__all__ = ["plan", "plan_sharded", "PackingConfig", "Plan", "ShardedPlan", "PlanError",
           "OverflowStats", "PaddingStats", "PlanSummary", "padding_stats", "plan_summary",
           "load_lengths", "write_plan"]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'packtool.planning' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"packtool.planning.{module}"), name)
    globals()[name] = value
    return value
