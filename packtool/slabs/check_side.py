"""A reader's hold on a float side column's NaN / +-inf values (FORMAT.md, "What a reader
checks"): pack keeps them as read and records the input's count per column in the manifest
(`stats.side_nan` / `side_inf`), so a decoded row group holding more than that count (any,
where it is 0) holds values changed after pack: a NaN old log-prob makes a PPO loss NaN. A
`SlabReader` also adds up the groups it has decoded (each once), so `inspect`, which reads
them all, holds the whole output's count. One sum per column and group (`side.nonfinite`:
counted only when the sum is not finite); no column read beyond the reader's own.
`verify`'s `side_nonfinite` is the same rule over the whole output, plus fewer than the
count where no token was dropped."""
from __future__ import annotations

import numpy as np

from packtool.side import nonfinite
from packtool.slabs.check_said import fix_of
from packtool.slabs.format import FormatError, SlabManifest

KINDS = (("nan", "NaN", np.isnan), ("inf", "+-inf", np.isinf))


def check_side_nonfinite(sm: SlabManifest, where: str, side: dict,
                         before: dict[str, tuple[int, int]] | None = None) -> dict[str, tuple[int, int]]:
    """Refuse a group (`side`: name -> (values, offsets), as `SlabReader` decodes it) whose float
    side column holds more NaN or +-inf values, with `before` (per column, the other groups this
    reader decoded), than the manifest counts for the whole output. Returns this group's
    non-zero counts per column, for the caller's `before` of the next groups."""
    stats, got = sm.raw["stats"], {}
    for c in sm.side_columns:
        if c.is_int or c.name not in side:
            continue
        vals, off = side[c.name]
        vals = vals[int(off[0]):int(off[-1])]
        here = nonfinite(vals)
        if not any(here):
            continue
        got[c.name] = here
        prior = (before or {}).get(c.name, (0, 0))
        for k, (key, word, test) in enumerate(KINDS):
            want = (stats.get(f"side_{key}") or {}).get(c.name)
            if want is None or here[k] + prior[k] <= want:  # None: no count to hold it to (older outputs)
                continue
            p = int(np.flatnonzero(test(vals).reshape(len(vals), -1).any(axis=1))[0])
            r = int(np.searchsorted(off - off[0], p, "right") - 1)
            said = (f"the manifest's stats.side_{key} says the input held none" if not want else
                    f"{here[k] + prior[k]:,} in the row groups read, where the manifest's stats.side_{key} says the "
                    f"input held {want:,}")
            raise FormatError(f"{where} row {r} position {p - int(off[r] - off[0])}: side column {c.name!r} holds "
                              f"{word}: {said} (values changed after pack); {fix_of(sm)}")
    return got
