"""Stage 4b, inspect: where the padding went, from lengths, a plan file or a packed output.

`report` builds the `InspectReport` from a `SlabSet`, which `planned` makes from lengths or a
plan file and `packed` from a packed output; `compare` the what-if and algorithm comparisons,
`figures` the report's figures as strings, `html` the standalone HTML page.
"""
from packtool.inspection.packed import inspect_packed
from packtool.inspection.planned import inspect_lengths, inspect_plan_file
from packtool.inspection.report import InspectError, InspectReport

__all__ = ["InspectReport", "InspectError", "inspect_lengths", "inspect_packed",
           "inspect_plan_file"]
