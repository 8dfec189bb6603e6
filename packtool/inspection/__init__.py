"""Stage 4b, inspect: where the padding went, from lengths, a plan file or a packed output.

`report` builds the `InspectReport`, `compare` the what-if and algorithm comparisons,
`figures` the report's figures as strings, `html` the standalone HTML page.
"""
from packtool.inspection.report import InspectError, InspectReport, inspect_lengths, inspect_packed, inspect_plan_file

__all__ = ["InspectReport", "InspectError", "inspect_lengths", "inspect_packed",
           "inspect_plan_file"]
