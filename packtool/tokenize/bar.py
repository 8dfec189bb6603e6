"""The tokenizing progress bar (rows, tokens, tokens/s, ETA) that tokenize_to_cache drives."""
from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from packtool.threads import starting


class TokenizeBar:
    """The tokenizing bar. Its unit is rows when every input stores its row count, else bytes
    on disk (JSON Lines store none), so the bar always has a total and an ETA."""

    def __init__(self, enabled: bool, total: int | None, by_bytes: bool = False) -> None:
        self.p = Progress(TextColumn("[bold]Tokenizing"), BarColumn(),
                          TextColumn("{task.fields[rows]} rows"), TextColumn("· {task.fields[tokens]} tokens"),
                          TextColumn("· {task.fields[rate]} tok/s"), TimeElapsedColumn(),
                          TextColumn("· ETA"), TimeRemainingColumn(), disable=not enabled,
                          console=Console(stderr=True))  # stdout stays for tables and --json
        self.task = self.p.add_task("tok", total=total, tokens="0", rate="-", rows="0")
        self.by_bytes = by_bytes
        self.rows = 0
        self.tokens = 0
        self.t0 = time.perf_counter()

    def at_bytes(self, n: int) -> None:
        """Bytes mode: the bar stands at `n` bytes of all inputs."""
        if self.by_bytes:
            self.p.update(self.task, completed=n)

    def __enter__(self):
        with starting():  # its refresh thread
            self.p.__enter__()
        return self

    def __exit__(self, *a):
        self.p.__exit__(*a)

    def advance(self, rows: int, tokens: int) -> None:
        self.rows += rows
        self.tokens += tokens
        dt = max(time.perf_counter() - self.t0, 1e-9)
        self.p.update(self.task, advance=0 if self.by_bytes else rows, rows=f"{self.rows:,}",
                      tokens=_human(self.tokens), rate=_human(self.tokens / dt))


def _human(x: float) -> str:
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= div:
            return f"{x / div:.1f}{unit}"
    return f"{x:.0f}"
