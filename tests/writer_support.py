"""Every writer of a file or folder packtool makes for the user, called with a target inside a
given folder: the class the placement rule (output.relations.packed_problem) must hold for.
Run from a folder holding toks.jsonl and lengths.npy (and, for inspect, a packed output `packed`)."""
from __future__ import annotations

import numpy as np
from typer.testing import CliRunner

from packtool.cli.app import app

runner = CliRunner()


def _pack_args(*extra):
    return ["pack", "toks.jsonl", "-C", "64", "--cache-dir", "cache", "--no-progress", *extra]


def write_into(what, out):
    """Writer `what` asked to write into folder `out` (the CLI: its result; the library and
    train's checks: raise or return)."""
    from types import SimpleNamespace
    if what == "plan -o":
        return runner.invoke(app, ["plan", "--lengths", "lengths.npy", "-o", f"{out}/plan.parquet"])
    if what == "inspect --html":
        return runner.invoke(app, ["inspect", "packed", "--html", f"{out}/report.html"])
    if what == "pack -o":
        return runner.invoke(app, _pack_args("-o", f"{out}/sub"))
    if what == "pack -o --engine ray":
        return runner.invoke(app, [*_pack_args("-o", f"{out}/sub"), "--engine", "ray"])
    if what == "library pack":
        import packtool
        return packtool.pack(["toks.jsonl"], output=f"{out}/sub", cache_dir="cache")
    if what == "library write_plan":
        import packtool
        from packtool.planning.plan_file import write_plan
        return write_plan(packtool.plan(np.arange(1, 9)), f"{out}/plan.parquet")
    if what == "library write_html":
        from packtool.inspection.html import write_html
        return write_html(None, f"{out}/report.html")
    if what == "train --save":
        from packtool.megatron.loop import check_save
        return check_save(f"{out}/ckpt", None, False)
    from packtool.megatron.loop import check_json_log
    return check_json_log(SimpleNamespace(json_log=f"{out}/log.jsonl", load=None, inputs=(), overwrite=False))


WRITERS = ["plan -o", "inspect --html", "pack -o", "pack -o --engine ray", "library pack",
           "library write_plan", "library write_html", "train --save", "train --json-log"]
