"""Ranks of a torch.distributed gloo group on CPU, each a spawned process: the scaffolding the
multi-rank tests shared by copy (stop 38's duplicates D6). `spawn_ranks` starts `world` processes
of `target(rank, *args)` with the GPUs hidden (CPU ranks take the CPU-only path on a machine with
CUDA too: megatron's SP embedding forks a CUDA RNG state else), waits for them, kills any still
running after `timeout` (a rank left waiting in a collective) and returns their exit codes (None:
it hung); `join_gloo` is a rank's first step. A test module's target must be importable by name
(a module-level function): spawn pickles it."""
from __future__ import annotations

import os


def join_gloo(rank: int, world: int, init: str) -> None:
    """Join the gloo group of `world` ranks that meet through the file `init`."""
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)


def spawn_ranks(target, world: int, args: tuple = (), timeout: float = 300) -> list[int | None]:
    """Exit codes of `world` spawned CPU processes `target(rank, *args)`; a hung one is killed, None."""
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=target, args=(r, *args)) for r in range(world)]
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # read by each child as it starts
    try:
        for p in procs:
            p.start()
    finally:
        if hidden is None:
            del os.environ["CUDA_VISIBLE_DEVICES"]
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = hidden
    for p in procs:
        p.join(timeout=timeout)
    codes = [p.exitcode for p in procs]
    for p in procs:
        if p.exitcode is None:
            p.kill()
            p.join()
    return codes
