"""The memory this machine has available now: the one probe every bound asks (planning's
capacity and worker bounds, the HF mask, the tokenize stage's whole-file reads), so that
each refuses what cannot fit against the same figure, and a test stands in for one place."""
from __future__ import annotations

import os


def available_bytes() -> int | None:
    """MemAvailable (Linux), else free physical pages; None when neither is known."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
