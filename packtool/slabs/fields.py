"""Every field of the manifest and its JSON type: the one table `slabs.format.parse_manifest`
holds a manifest to, so that every reader (verify, inspect, the Megatron dataset, `packtool.hf`,
train) gets the same refusal at once. A field a check relies on that is null, missing, of
another type or out of range is one line naming the field and the file (S33-3: a null
`stats.sequences` switched the coverage check off, a deleted `stats` every stats check).

Fields outside this table are the provenance record (`input`, `packtool_version`, the
tokenizer's labels and hashes: `slabs.provenance`, checked by `verify` alone, used by no
consumer's check; FORMAT.md "The provenance record") and the per-column entries of
`side_columns` past their types (`side.SideColumn.from_dict`).
"""
from __future__ import annotations

import json
import math
from dataclasses import fields

from packtool.planning.core import OverflowStats
from packtool.planning.summary import DataChanges

MAX_COUNT = 1 << 48  # more tokens, rows or bytes than any output holds; JSON ints stay exact below 2^53


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _count(v) -> str | None:
    return None if _is_int(v) and 0 <= v <= MAX_COUNT else f"a count in [0, {MAX_COUNT}]"


def _positive(v) -> str | None:  # the ranges of alignment and packing numbers: slabs.format.check_numbers
    return None if _is_int(v) and v >= 1 else "an integer >= 1"


def _int(v) -> str | None:
    return None if _is_int(v) else "an integer"


def _opt_positive(v) -> str | None:
    return None if v is None else _positive(v)


def _opt_id(v) -> str | None:
    return None if v is None or (_is_int(v) and v >= 0) else "null or a token id >= 0"


def _id(v) -> str | None:
    return None if _is_int(v) and v >= 0 else "a token id >= 0"


def _str(v) -> str | None:
    return None if isinstance(v, str) and v else "a non-empty string"


def _bool(v) -> str | None:
    return None if isinstance(v, bool) else "true or false"


def _ratio(v) -> str | None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
    return None if ok else "a finite number >= 0"


def _number(v) -> str | None:
    return None if isinstance(v, (int, float)) and not isinstance(v, bool) else "a number"


class Counts:
    """An object of counts under names of the output's own (stats.side_nan: one per float side column)."""


COUNTS_BY_NAME = Counts()

# planning's figures of the overflow policy, each a count
# figures added after outputs were written that lack them: absent there, a count where present
# (truncate's sequences cut to no target, S44-3; the rows of one token, S45A-7; verify --source recounts them)
LATER_COUNTS = frozenset({"untrained", "sequences_untrained", "sequences_one_token"})


def _later_count(v) -> str | None:
    return None if v is _ABSENT else _count(v)


_OVERFLOW = {f.name: _str if f.name == "policy" else _later_count if f.name in LATER_COUNTS else _count
             for f in fields(OverflowStats)}
# planning's record of the rows changed
_CHANGES = {f.name: _later_count if f.name in LATER_COUNTS else _count for f in fields(DataChanges)}
# every key pack writes into stats: each is held to the slabs by verify, most by every reader at
# open (slabs.check) or by inspect; none may be absent (an absent one skipped its check)
STATS = {"sequences": _count, "segments": _count, "slabs": _count, "real_tokens": _count,
         "loss_tokens": _count, "physical_tokens": _count, "layout_pad": _count, "tail_pad": _count,
         "fill_pad": _count, "slack": _count, "lower_bound": _count, "l2_bound": _count,
         "dp_imbalance": _ratio, "dp_moved": _count, "overflow": _OVERFLOW,
         "skipped_rows": {"empty": _count, "all_masked": _count}, "changes": _CHANGES,
         "side_nan": COUNTS_BY_NAME, "side_inf": COUNTS_BY_NAME}
CONFIG = {"alignment": {"tp": _positive, "cp": _positive, "sp": _bool, "fp8": _str, "capacity": _positive,
                        "fixed_length": _opt_positive, "convention": _str, "s": _positive, "t": _positive,
                        "usable": _positive},
          "packing": {"algorithm": _str, "overflow": _str, "dp": _positive, "seed": _int}}
# `{}` for an output packed from token ids without a tokenizer; else these ids, which the readers
# check every token and pad by (the labels and hashes beside them are provenance)
TOKENIZER_IDS = {"pad_id": _id, "eos_id": _opt_id, "bos_id": _opt_id, "vocab_size": _positive}
def _file(v) -> str | None:  # its form (a shard name inside the folder): slabs.format.shard_names
    return None if isinstance(v, str) and v else "a plain file name in the output folder"


SHARD = {"file": _file, "rows": _count, "tokens": _count, "loss_tokens": _count, "bytes": _count}
CHECKSUMS = ("xxh3_128", "sha256")  # a shard entry has one: sha256 in outputs of older packtool
SIDE_COLUMN = {"name": _str, "dtype": _str, "width": _positive, "fill": _number, "kind": _str}


class FieldError(ValueError):
    """A field of the manifest that is absent, null, of another type or out of range: `field`
    is its dotted path (`stats.sequences`, `shards[0].rows`), `want` what it must be."""

    def __init__(self, field: str, value, want: str):
        self.field, self.want = field, want
        got = "absent" if value is _ABSENT else json.dumps(value, default=str)[:80]  # as the file says it
        super().__init__(f"{field} is {got}, not {want}")


_ABSENT = object()


def check_fields(m: dict, shards_only: bool = False) -> None:
    """Raise FieldError for the first field of `m` that is not what pack writes (format and
    schema_version are the caller's, checked first); `shards_only`: the shard list alone."""
    if shards_only:
        return _check_shards(m)
    _object(m, "config", CONFIG)
    _object(m, "stats", STATS)
    tok = m.get("tokenizer", _ABSENT)
    if not isinstance(tok, dict):
        raise FieldError("tokenizer", tok, "an object ({} for an output packed without a tokenizer)")
    if tok:
        _object(m, "tokenizer", TOKENIZER_IDS)
    if m.get("input") is not None and not isinstance(m["input"], dict):  # its fields: verify's (provenance)
        raise FieldError("input", m["input"], "an object (the provenance record)")
    _check_shards(m)
    cols = m.get("side_columns", _ABSENT)  # (version 1 had none: refused before, slabs.format.OLD_VERSION)
    if not isinstance(cols, list):
        raise FieldError("side_columns", cols, "a list ([] for an output without side columns)")
    for i, e in enumerate(cols):
        _object({f"side_columns[{i}]": e}, f"side_columns[{i}]", SIDE_COLUMN)


def _check_shards(m: dict) -> None:
    shards = m.get("shards", _ABSENT)
    if not isinstance(shards, list):
        raise FieldError("shards", shards, "a list of shard entries")
    for i, e in enumerate(shards):
        _object({f"shards[{i}]": e}, f"shards[{i}]", SHARD)
        sums = [k for k in CHECKSUMS if k in e]
        if len(sums) != 1 or _str(e[sums[0]]):
            raise FieldError(f"shards[{i}].{sums[0] if sums else CHECKSUMS[0]}",
                             e[sums[0]] if len(sums) == 1 else _ABSENT, "the shard's checksum, hex digits")


def _object(parent: dict, key: str, spec: dict, where: str = "") -> None:
    """parent[key] an object holding every key of `spec`, each of its type (other keys: the
    caller's, or a later packtool's)."""
    name = f"{where}.{key}" if where else key
    obj = parent.get(key, _ABSENT)
    if not isinstance(obj, dict):
        raise FieldError(name, obj, "an object")
    for k, rule in spec.items():
        v = obj.get(k, _ABSENT)
        if isinstance(rule, dict):
            _object(obj, k, rule, where=name)
        elif isinstance(rule, Counts):
            if not isinstance(v, dict):
                raise FieldError(f"{name}.{k}", v, "an object of counts ({} where there are none)")
            for c, x in v.items():
                if _count(x):
                    raise FieldError(f"{name}.{k}.{c}", x, _count(x))
        elif rule(v):  # _ABSENT is no value of any type: every rule says what it wants
            raise FieldError(f"{name}.{k}", v, rule(v))


def check_side_counts(stats: dict, floats: set[str]) -> None:
    """stats.side_nan / side_inf hold one count per float side column, no other: verify holds each
    to the slabs, so a deleted one would skip its column's check."""
    for key in ("side_nan", "side_inf"):
        have = set(stats[key])
        for name in sorted(floats - have):
            raise FieldError(f"stats.{key}.{name}", _ABSENT, f"a count of float side column {name!r}")
        for name in sorted(have - floats):
            raise FieldError(f"stats.{key}.{name}", stats[key][name], f"absent: side_columns has no float {name!r}")
