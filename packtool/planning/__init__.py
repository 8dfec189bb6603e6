"""Stage 2, plan: sequence lengths in, a placement of every segment in a slab out.

`core` (PackingConfig, the overflow policies, `plan`), `bins` and `sharded` (row shards
planned apart and merged, for inputs larger than memory), `spill` (the sharded plan with
its placements on disk), `slabs` (per-slab specs and the routing of segments to output
shards), `summary` (padding figures and the plan summary). Asks `align` and `layout` for
every footprint; never imports printing or later stages (docs/DESIGN.md).
"""
from packtool.planning.core import OverflowStats, PackingConfig, Plan, PlanError, plan
from packtool.planning.lengths import load_lengths
from packtool.planning.plan_file import write_plan
from packtool.planning.sharded import ShardedPlan, plan_sharded
from packtool.planning.summary import PaddingStats, PlanSummary, padding_stats, plan_summary

__all__ = ["plan", "plan_sharded", "PackingConfig", "Plan", "ShardedPlan", "PlanError",
           "OverflowStats", "PaddingStats", "PlanSummary", "padding_stats", "plan_summary",
           "load_lengths", "write_plan"]
