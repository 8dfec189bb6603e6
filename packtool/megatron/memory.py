"""`packtool train`'s memory: a model that cannot fit is refused before it is built, and an
allocation torch fails is the README's out-of-memory line (kind `resources`, exit 2), not a
packtool bug (S36-15). `--hidden 65536` built until the machine swapped, or, under a limit,
ended in torch's `RuntimeError: DefaultCPUAllocator: can't allocate memory` (exit 3)."""
from __future__ import annotations

import os
import re
from contextlib import contextmanager

# per parameter, at least: the weight and its gradient (fp32 on cpu, bf16 on cuda with an fp32
# master and its gradient), and AdamW's two fp32 moments
BYTES_PER_PARAM = 16


class TrainOutOfMemory(MemoryError):
    """An allocation of the train that failed, or surely would (the CLI's resources line)."""


class ModelTooLargeError(TrainOutOfMemory):
    """A model shape whose training state cannot fit in the memory this process may take."""


def _room(device: str) -> tuple[int, str] | None:
    """(bytes, what holds them) the model's state may take at most on `device`."""
    if device.startswith("cuda"):
        import torch
        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return free, f"the GPU's free memory ({device})"
    from packtool.tokenize.long_rows import room  # the limits an allocation fails at (ulimit -v, overcommit)
    found = [r for r in [room()] if r is not None]
    try:  # more than the machine's RAM swaps for hours before anything fails
        found.append((os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "this machine's memory"))
    except (ValueError, OSError):
        pass
    return min(found) if found else None


def check_fits(shape, tp: int, device: str) -> None:
    """Refuse, before it is built, a model whose weights, gradients and AdamW state (a lower
    bound: activations come on top) exceed the memory this rank may take; TP splits them."""
    need = shape.params() * BYTES_PER_PARAM // tp
    room = _room(device)
    if room is None or need <= room[0]:
        return
    split = f" over {tp} tensor-parallel ranks" if tp > 1 else ""
    raise ModelTooLargeError(
        f"the model (layers {shape.layers}, hidden {shape.hidden}, ffn {shape.ffn}, vocab {shape.vocab}: "
        f"{shape.params() / 1e9:.2f}G parameters{split}) needs at least {need / 2**30:,.1f} GiB for its weights, "
        f"gradients and AdamW state ({BYTES_PER_PARAM} bytes a parameter), but {room[1]} is "
        f"{max(room[0], 0) / 2**30:,.1f} GiB: train a smaller model (layers, hidden, ffn)")


_CPU_SIZE = re.compile(r"tried to allocate (\d+) bytes")
_GPU_SIZE = re.compile(r"Tried to allocate ([\d.]+ [KMGT]?i?B)")


def allocation_failure(e: BaseException) -> str | None:
    """What torch could not allocate, when `e` is its allocator's failure (cpu or an accelerator's,
    in any of torch's words: free_memory.device_out_of_memory), else None."""
    from packtool.free_memory import device_out_of_memory
    text = str(e)
    if not (device_out_of_memory(e) or "can't allocate memory" in text):
        return None
    if m := _CPU_SIZE.search(text):
        return f"{int(m[1]) / 2**30:,.1f} GiB"
    return m[1] if (m := _GPU_SIZE.search(text)) else "a tensor"


@contextmanager
def torch_allocations(device: str):
    """Within the block, an allocation torch fails is a MemoryError (the README's resources line)."""
    try:
        yield
    except RuntimeError as e:
        what = allocation_failure(e)
        if what is None:
            raise
        raise TrainOutOfMemory(f"torch could not allocate {what} on {device}") from None
