"""A drop-in for SkyRL's sequence packer (`skyrl.train.dataset.bin_packing`, 0.3.0).

Switch with one import::

    # from skyrl.train.dataset.bin_packing import make_seq_packer
    from packtool.online.skyrl import make_seq_packer

`SeqPacker`, `FirstFitDecreasing`, `Balanced`, `PackingStrategy` and `make_seq_packer` take
SkyRL's arguments and return SkyRL's bins (`pack(sequence_lengths) -> list[list[int]]`):
with the default alignment (s = t = 1) and `moves="skyrl"` the bins are identical, element
order included, because each rule is SkyRL's:
  FFD       lengths descending, equal lengths by index DESCENDING (SkyRL sorts (len, i)
            tuples in reverse); first bin with room; a length above the capacity raises.
  Balanced  lengths descending, equal lengths by index ascending (a stable sort on length);
            the least-loaded bin, ties to the lowest bin id (a heap of (load, id)), if it
            fits, else a new bin; a length above the capacity gets its own bin (soft cap).
  count     at least min_bin_count, then up to a multiple of bin_count_multiple; each new
            bin takes the last sequence of the bin holding the most (ties: highest id).
Where packtool differs, on purpose and only when asked:
  alignment (tp/cp/fp8/convention or an `Alignment`): capacity applies to footprints --
            each length rounded up to s, the bin's sum rounded up to t -- so a bin never
            overflows once padded; SkyRL counts raw lengths and can overflow by the pads.
  moves="balance": new bins take the largest sequence of the heaviest bin (packers.dp),
            which lowers the slowest micro-batch; SkyRL's rule moves the smallest sequence
            of the fullest bin and leaves near-empty bins.
`pack_arrays(lengths)` returns the `StepBins` (numpy CSR) without building lists.
"""
from __future__ import annotations

import enum
from functools import lru_cache
from typing import Optional

from packtool.align import Alignment
from packtool.errors import spelled_as
from packtool.integers import INT32_MAX, short
from packtool.online.step import OnlinePackError, StepBins, StepPacker, as_lengths, check_int
from packtool.params import expect


class PackingStrategy(enum.Enum):
    """Supported sequence packing algorithms (SkyRL's names and values)."""

    FIRST_FIT_DECREASING = "first_fit_decreasing"
    BALANCED = "balanced"


@lru_cache(maxsize=64)
def _alignment(tp, cp, sp, fp8, capacity, convention) -> Alignment:
    # SkyRL builds a packer every step; the Alignment (frozen) is the same every time
    return Alignment(tp=tp, cp=cp, sp=sp, fp8=fp8, capacity=capacity, convention=convention)


class SeqPacker:
    """SkyRL's `SeqPacker` interface on packtool's compiled packers.

    bin_capacity, min_bin_count, bin_count_multiple: as SkyRL's.
    alignment: a packtool `Alignment` whose capacity is bin_capacity; or tp, cp, sp, fp8,
      convention to build one (the per-sequence multiple s and per-slab multiple t).
    moves: "skyrl" (default: SkyRL's bins) or "balance" (packtool's compute-balancing moves).
    """

    _algorithm = "ffd"
    _ties = "descending"

    def __init__(self, bin_capacity: int, min_bin_count: Optional[int] = None,
                 bin_count_multiple: Optional[int] = None, *,
                 alignment: Alignment | None = None, tp: int = 1, cp: int = 1,
                 sp: bool | None = None, fp8: str = "none", convention: str = "packtool",
                 moves: str = "skyrl"):
        # OnlinePackError is a ValueError, as SkyRL raises
        bin_capacity = check_int("bin_capacity", bin_capacity, 1, maximum=INT32_MAX)  # a slab's offsets are int32
        min_bin_count = check_int("min_bin_count", min_bin_count, 0, optional=True)
        bin_count_multiple = check_int("bin_count_multiple", bin_count_multiple, 1, optional=True)
        expect(alignment, Alignment, type(self).__name__, "alignment", optional=True)
        if alignment is None:
            with spelled_as({"capacity": "bin_capacity"}):  # the Alignment's checks, in this call's words
                alignment = _alignment(tp, cp, sp, fp8, bin_capacity, convention)
        elif alignment.capacity != bin_capacity or alignment.fixed_length is not None:
            raise OnlinePackError(f"alignment capacity {alignment.capacity} (fixed_length "
                             f"{alignment.fixed_length}) must equal bin_capacity "
                             f"{bin_capacity} with no fixed length: build the Alignment with "
                             f"capacity={bin_capacity}")
        self.bin_capacity = bin_capacity
        self.min_bin_count = min_bin_count
        self.bin_count_multiple = bin_count_multiple
        self.alignment = alignment
        self._packer = StepPacker(alignment, algorithm=self._algorithm,
                                  min_bin_count=min_bin_count,
                                  bin_count_multiple=bin_count_multiple, moves=moves,
                                  ties=self._ties)

    def pack_arrays(self, sequence_lengths) -> StepBins:
        """The bins as numpy CSR (`StepBins`), for callers that do not need lists."""
        return self._packer.pack(as_lengths(sequence_lengths, "sequence_lengths"))

    def pack(self, sequence_lengths) -> list[list[int]]:
        """Pack `sequence_lengths` (list, numpy or torch) into bins of sequence indices."""
        return self._packer.pack(as_lengths(sequence_lengths, "sequence_lengths")).bins()


class FirstFitDecreasing(SeqPacker):
    """First-fit decreasing with SkyRL's tie order; a sequence above the capacity raises."""

    _algorithm = "ffd"
    _ties = "descending"


class Balanced(SeqPacker):
    """SkyRL's least-loaded packer; the capacity is a soft cap (oversized: own bin)."""

    _algorithm = "least-loaded"
    _ties = "ascending"


_PACKERS = {PackingStrategy.FIRST_FIT_DECREASING: FirstFitDecreasing,
            PackingStrategy.BALANCED: Balanced}


def make_seq_packer(algorithm: PackingStrategy | str, bin_capacity: int,
                    min_bin_count: Optional[int] = None,
                    bin_count_multiple: Optional[int] = None, **alignment) -> SeqPacker:
    """SkyRL's factory; extra keyword arguments (alignment, tp, cp, sp, fp8, convention,
    moves) go to `SeqPacker`."""
    if isinstance(algorithm, str):
        algorithm = PackingStrategy.__members__.get(algorithm.upper(), algorithm)
    if not isinstance(algorithm, PackingStrategy) or algorithm not in _PACKERS:  # SkyRL's names: online.ALGORITHMS are pack_step's packers
        names = ", ".join(repr(a.value) for a in PackingStrategy)
        raise OnlinePackError(f"Unknown packing algorithm: {short(algorithm)}: algorithm must be a PackingStrategy "
                              f"or one of {names} (SkyRL's names, its message kept; packtool.online.ALGORITHMS "
                              f"are pack_step's)")
    return _PACKERS[algorithm](bin_capacity=bin_capacity, min_bin_count=min_bin_count,
                               bin_count_multiple=bin_count_multiple, **alignment)


def load_reference():
    """The installed `skyrl` package's own bin_packing module, for side-by-side checks
    (tests, bench/online.py); None when skyrl is not installed. Loaded from its file:
    importing `skyrl.train.dataset` needs `datasets` and more, bin_packing.py only the
    standard library."""
    import importlib.util
    import os

    spec = importlib.util.find_spec("skyrl")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "train", "dataset",
                        "bin_packing.py")
    if not os.path.exists(path):
        return None
    mspec = importlib.util.spec_from_file_location("skyrl_bin_packing_reference", path)
    mod = importlib.util.module_from_spec(mspec)
    mspec.loader.exec_module(mod)
    return mod
