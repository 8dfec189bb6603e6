"""What a slab capacity costs, checked before any allocation: a `-C` (or `--fixed-length`)
this machine cannot fit is one line naming the flag and the estimate, not a run that swaps
(the format's own bound, 2^31 - 1 tokens per slab, is align.Alignment's). Memory that grows
with the capacity rather than with the data:
  - the sharded planner's footprint histogram and its L2 bound, indexed 0..C
    (`PLAN_BYTES_PER_C`, measured: 5.2 GB peak at -C 100000000 on 597 tokens);
  - each shard-writer thread holds at least one whole slab while it encodes
    (`WRITE_BYTES_PER_TOKEN`: ids, mask and their Arrow/Parquet copies).
Memory that grows with a capacity against the data: `--overflow split` cuts a row into
length / C chunks, each a planned segment (`PLAN_BYTES_PER_SEGMENT`, measured: 4.96 GB peak
for one 300M-token row at -C 16, 18.75M chunks, against 0.68 GB for 1.9M).
"""
from __future__ import annotations

from packtool.align import Alignment
from packtool.errors import PacktoolConfigError, arg
from packtool import free_memory

PLAN_BYTES_PER_C = 56
WRITE_BYTES_PER_TOKEN = 16
PLAN_BYTES_PER_SEGMENT = 256
# A worker process packtool starts (verify's pool; the local Ray node's workers): what it holds
# of its own after its imports (verify's, measured: 45-55 MiB private, 230 MiB resident with
# the pages it shares with the fork server) plus a row group's columns while it checks one.
PROCESS_BYTES = 128 << 20
SHARE = 0.5  # of the memory available now: the rest is for the data, the cache and others


def available_bytes() -> int | None:
    """The memory available now (packtool.free_memory, asked at each call: one probe for all)."""
    return free_memory.available_bytes()


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB"


def check_capacity(a: Alignment, *, sharded: bool = False, writers: int = 0) -> None:
    """Refuse a capacity whose capacity-sized tables (the sharded planner's, `writers`
    shard-writer threads' slabs) need more than half the memory this machine has available."""
    name = a.usable_arg  # with --fixed-length every slab is that long: lowering -C alone changes nothing
    slab = a.capacity if a.fixed_length is None else a.fixed_length
    need = max(PLAN_BYTES_PER_C * (a.usable + 1) if sharded else 0, WRITE_BYTES_PER_TOKEN * slab * writers)
    have = available_bytes()
    if have is None or need <= SHARE * have:
        return
    what = (f"the sharded planner's tables (56 bytes per token of {arg(name)})" if sharded and
            PLAN_BYTES_PER_C * (a.usable + 1) >= WRITE_BYTES_PER_TOKEN * slab * writers else
            f"{writers} shard writer(s) holding a slab each ({WRITE_BYTES_PER_TOKEN} bytes per token)")
    raise PacktoolConfigError(f"{arg(name, slab)}: needs about {_gb(need)} for {what}, over half the "
                    f"{_gb(have)} this machine has available; give a smaller {arg(name)}"
                    + (f", fewer {arg('workers')}" if writers > 1 else "")
                    + (f" or {arg('plan_shard_rows', 0)} (a global plan's tables grow with the rows)" if sharded else ""))


def check_split(n_segments: int, a, longest: int) -> None:
    """Refuse a split whose chunks (one planned segment each) need more than half the memory
    available: a typo'd -C or length must not swap the machine before its one line."""
    need = PLAN_BYTES_PER_SEGMENT * n_segments
    have = available_bytes()
    if have is None or need <= SHARE * have:
        return
    name = a.usable_arg  # the chunks are U long: U is --fixed-length when given
    raise PacktoolConfigError(f"{arg(name, getattr(a, name))}: {arg('overflow', 'split')} cuts the rows into "
                              f"{n_segments:,} chunks (the longest row has {longest:,} tokens), about {_gb(need)} "
                              f"of plan tables, over half the {_gb(have)} this machine has available; "
                              f"{a.raise_usable()} or use {arg('overflow', choices=('truncate', 'singleton'))}")


def check_processes(count: int, name: str, value: int, what: str) -> None:
    """Refuse `count` worker processes (asked for by argument `name`=`value`) whose memory needs
    more than half of what is available: `verify --workers 4096` on 301 shards started 301
    processes and the machine's load went past 300 with no line (issue 23 class 3)."""
    need = PROCESS_BYTES * count
    have = available_bytes()
    if count <= 1 or have is None or need <= SHARE * have:
        return
    most = max(1, int(SHARE * have // PROCESS_BYTES))
    raise PacktoolConfigError(f"{arg(name, value)}: would start {count:,} {what} of ~{PROCESS_BYTES >> 20} MiB "
                              f"each, about {_gb(need)}, over half the {_gb(have)} this machine has "
                              f"available; give {arg(name, most)} or fewer (the default is one per core)")


__all__ = ["available_bytes", "check_capacity", "check_processes", "check_split"]
