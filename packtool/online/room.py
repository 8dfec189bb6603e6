"""What a step's tensors cost, checked before they are allocated (issue 23 class 3): the
online API's counts are bounded only by the format (2^31 - 1), so an argument that does not
follow from the data (`micro_batches`' pad_to, an Alignment's fixed_length) could ask for
gigabytes for a few sequences; a size that cannot fit in half of the memory this process may
still take (hf.mask.room_bytes: available memory within ulimit/overcommit; on a CUDA device,
its free memory) is one OnlinePackError naming the argument and the estimate, not an
allocator's traceback or a swapping node."""
from __future__ import annotations

from packtool.hf.mask import room_bytes
from packtool.planning.bounds import SHARE
from packtool.online.step import OnlinePackError

# an empty micro-batch: its offset, footprint and flag (17 bytes), their concatenated copies,
# and the empty list `MicroBatches.lists()` builds for it (56 bytes + its slot)
EMPTY_MICRO_BATCH_BYTES = 96
# one slab position in pack_tensors: input_ids, labels and its masked copy (int64), the
# weights before and after the shift (float32), segment, position and index (int64), and
# the host-side numpy segment/position tables
POSITION_BYTES = 80


def _gib(n: float) -> str:
    return f"{n / 2 ** 30:.1f} GiB"


def device_room(device) -> tuple[int | None, str]:
    """(bytes a tensor of `device` may still take, what that is), None when unknown."""
    if device is not None and getattr(device, "type", "cpu") == "cuda":
        import torch
        try:
            return int(torch.cuda.mem_get_info(device)[0]), f"free on {device}"
        except RuntimeError:  # no driver state to ask: the allocator will say
            return None, ""
    return room_bytes(), "this process can still take"


def refuse_over(need: int, have: int | None, what: str, fix: str, where: str) -> None:
    """One line when `need` bytes exceed half of `have` (None: unknown, not refused)."""
    if have is None or need <= SHARE * have:
        return
    raise OnlinePackError(f"{what} needs about {_gib(need)}, over half the {_gib(have)} {where}: {fix}")


def check_padding(pad_to: int, pad: int, rows: int) -> None:
    have, where = device_room(None)
    refuse_over(EMPTY_MICRO_BATCH_BYTES * pad, have,
                f"pad_to={pad_to:,} would add {pad:,} empty micro-batches for {rows:,} rows, which",
                "pass the largest micro-batch count over the DP ranks (each micro-batch holds at least "
                "one row, so it is at most the largest rank's row count)", where)


def check_slab(total: int, alignment, side_bytes: int, device) -> None:
    """Refuse a slab of `total` positions (`side_bytes` per position for the side columns,
    held twice: as given and shifted) that the device cannot hold."""
    have, where = device_room(device)
    name = "fixed_length" if alignment.fixed_length is not None else "capacity"
    fix = (f"give a smaller Alignment.fixed_length (or none: a slab as long as its sequences)"
           if name == "fixed_length" else "pass fewer or shorter sequences per micro-batch")
    refuse_over(total * (POSITION_BYTES + 2 * side_bytes), have,
                f"a {total:,}-position slab ({name}={getattr(alignment, name):,}) for its tensors", fix, where)
