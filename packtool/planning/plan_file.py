"""The plan Parquet (`packtool plan --output`): one row per segment, and the alignment and
packing settings it was made with in the schema metadata (key `packtool.plan`), so that
`inspect --plan` uses them rather than assuming flags."""
from __future__ import annotations

import json
import os
from contextlib import contextmanager
from dataclasses import asdict, fields
from typing import Iterator

from packtool import __version__
from packtool.align import Alignment, AlignmentError
from packtool.errors import PacktoolOutputError, arg, cli_flag
from packtool.output.files import check_new_file, write_file
from packtool.output.lock import holding_file
from packtool.planning.core import OverflowStats, PackingConfig, Plan, PlanError, config_dict, config_from_dict
from packtool.planning.lengths import PlanInputError

META_KEY = b"packtool.plan"
PLAN_SUFFIXES = (".parquet", ".pq")  # what the file is, whatever the name: no other format is written


def plan_config(p: Plan) -> dict:
    """The settings, and the overflow figures the plan made: truncate's (rows cut, tokens
    dropped) are in no segment of the file (a cut row looks like a row of U tokens), so
    `inspect --plan` reads them here (`read_plan_overflow`)."""
    return {"packtool_version": __version__, "num_sequences": int(p.num_sequences),
            **config_dict(p.alignment, p.packing),
            "overflow": {k: v if k == "policy" else int(v) for k, v in asdict(p.overflow).items()}}


@contextmanager
def holding_plan_path(path: str, overwrite: bool = False, inputs=(), also=None) -> Iterator[str]:
    """The plan file checked (packtool.output's rules, then `also()`: the CLI's check that it
    is not inside a packed output, a rule of a later stage) and held for the block
    (output.lock), so a second run on the same path is refused rather than both writing it,
    the last one silently winning."""
    def check() -> str:
        p = check_new_file(path, "output", replace=overwrite, inputs=inputs)
        _refuse_other_kind(path)
        if also is not None:
            also()
        return p
    with holding_file(check, path, "output", "plan", "plan file") as p:
        yield p


def _refuse_other_kind(path) -> None:
    """A plan file is Parquet whatever its name: `plan.json` held Parquet bytes that the next
    `pack` of its folder read as JSON ("invalid UTF-8 ... re-encode the file"), and other tools
    would too (S49A-3). A name with another suffix is refused; one with none is taken as given."""
    name = os.path.basename(os.fspath(path))
    ext = os.path.splitext(name)[1]
    if ext and ext.lower() not in PLAN_SUFFIXES:
        stem = name[:-len(ext)]
        fixed = stem if stem.lower().endswith(PLAN_SUFFIXES) else f"{stem}.parquet"
        raise PacktoolOutputError(f"{arg('output')} writes a plan as Parquet whatever its name, and a {ext} name "
                                  f"says another kind to every reader (a pack of its folder too); name it {fixed}",
                                  path=os.fspath(path), flag=cli_flag("output"))


def write_plan(p: Plan, path: str, overwrite: bool = False, inputs=()) -> None:
    """One row per segment: slab, dp_rank, step, source_index, chunk_index, offsets, lengths;
    the settings in the schema metadata. Written through packtool.output: an existing file is
    replaced only with `overwrite`, never one of `inputs` (the --lengths file) nor a link, and
    never while another run holds it (the CLI holds it from its start: `holding_plan_path`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    lay = p.layout
    real = ~lay.is_fill
    slab = lay.bin_of_segment()[real]
    table = pa.table({
        "slab": pa.array(slab, pa.int64()),
        "dp_rank": pa.array(p.dp_rank[slab], pa.int32()),
        "step": pa.array(p.step[slab], pa.int32()),
        "source_index": pa.array(p.segments.source, pa.int64()),
        "chunk_index": pa.array(p.segments.chunk, pa.int32()),
        "source_offset": pa.array(p.segments.offset, pa.int64()),
        "length": pa.array(p.segments.length, pa.int32()),
        "padded": pa.array(lay.seg_padded[real], pa.int32()),
        "start": pa.array(lay.seg_start[real], pa.int32()),
    }).replace_schema_metadata({META_KEY: json.dumps(plan_config(p), sort_keys=True).encode()})
    with holding_plan_path(path, overwrite, inputs), \
            write_file(path, "output", replace=overwrite, inputs=inputs) as f:
        pq.write_table(table, f, compression="zstd")


def read_plan_config(path: str) -> tuple[Alignment, PackingConfig] | None:
    """The settings a plan file records; None for a plan file written before they were."""
    import pyarrow.parquet as pq
    meta = pq.read_schema(path).metadata or {}
    raw = meta.get(META_KEY)
    if raw is None:
        return None
    from packtool.json_text import loads
    from packtool.tokenize.json_depth import check_json_depth
    check_json_depth(raw, path, per_line=False)
    try:
        align, packing = config_from_dict(loads(raw))  # a key twice: refused, never the last one
    except (ValueError, KeyError, TypeError, AlignmentError, PlanError) as e:
        raise PlanInputError(f"{path}: the plan settings in its metadata cannot be read "  # kind input
                             f"({type(e).__name__}: {e}); write it again with `packtool plan --output`") from None
    return align, packing


def read_plan_overflow(path: str, policy: str) -> OverflowStats | None:
    """The overflow figures a plan file records (`plan_config`), made under `policy` (the
    settings it is read with); None for a file written before they were recorded. A record of
    another policy, or a figure that is not a count, is an edited file, refused."""
    import pyarrow.parquet as pq
    raw = (pq.read_schema(path).metadata or {}).get(META_KEY)
    if raw is None:
        return None
    from packtool.json_text import loads
    rec = loads(raw).get("overflow")  # parsed before, by read_plan_config: depth and keys checked
    if rec is None:
        return None
    names = {f.name for f in fields(OverflowStats)} - {"policy"}
    if not (isinstance(rec, dict) and rec.get("policy") == policy and set(rec) - {"policy"} <= names
            and all(type(rec[k]) is int and rec[k] >= 0 for k in set(rec) - {"policy"})):
        raise PlanInputError(f"{path}: the overflow figures in its metadata ({json.dumps(rec)[:200]}) are not "
                             f"counts made under overflow {policy!r}: the file was edited or damaged: write it "
                             f"again with `packtool plan --output`")
    return OverflowStats(**rec)


def plan_flags(a: Alignment, pk: PackingConfig) -> str:
    """The command-line flags that give these settings, or a library caller's arguments."""
    if cli_flag("capacity") is None:
        return ", ".join(f"{k}={v!r}" for k, v in (
            ("capacity", a.capacity), ("tp", a.tp), ("cp", a.cp), ("sp", a.sp), ("fp8", a.fp8),
            ("fixed_length", a.fixed_length), ("convention", a.convention), ("algorithm", pk.algorithm),
            ("overflow", pk.overflow), ("dp", pk.dp), ("seed", pk.seed)) if k != "fixed_length" or v is not None)
    fl = f" --fixed-length {a.fixed_length}" if a.fixed_length is not None else ""
    return (f"-C {a.capacity} --tp {a.tp} --cp {a.cp} --{'' if a.sp else 'no-'}sp --fp8 {a.fp8}{fl} "
            f"--convention {a.convention} -a {pk.algorithm} --overflow {pk.overflow} --dp {pk.dp} "
            f"--seed {pk.seed}")


__all__ = ["META_KEY", "PLAN_SUFFIXES", "plan_config", "plan_flags", "read_plan_config", "read_plan_overflow",
           "write_plan"]
