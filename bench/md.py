"""Replace one `## heading` section of BENCHMARKS.md, leaving the others alone."""
from __future__ import annotations

import os
import re

PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "BENCHMARKS.md")


def update_section(heading: str, body: str, path: str = PATH) -> None:
    text = open(path).read() if os.path.exists(path) else "# Benchmarks\n"
    block = f"## {heading}\n\n{body.strip()}\n\n"
    pat = re.compile(rf"^## {re.escape(heading)}\n.*?(?=^## |\Z)", re.S | re.M)
    text = pat.sub(lambda _: block, text) if pat.search(text) else text.rstrip() + "\n\n" + block
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)
