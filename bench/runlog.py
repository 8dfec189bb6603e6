"""One bench run's record: printed as a JSON line and appended to the --log file, the form
bench/results/*/ keeps (shared by the pack benches run as `python bench/NAME.py`)."""
from __future__ import annotations

import json


def emit(record: dict, log: str | None) -> None:
    print(json.dumps(record), flush=True)
    if log:
        with open(log, "a") as f:
            f.write(json.dumps(record) + "\n")
