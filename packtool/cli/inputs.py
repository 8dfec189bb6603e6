"""Input arguments the command line refuses before any work: stdin (`-`) and a missing path that
would otherwise be looked up as a Hugging Face dataset name. (Shape flags that contradict each
other are refused by TokenizeConfig, for the library too.)"""
from __future__ import annotations

import os

from packtool.errors import PacktoolInputError
from packtool.storage import is_uri, locate
from packtool.tokenize.hf_input import FILE_SUFFIXES


def check_input_specs(inputs: list[str], hf_flags: bool) -> None:
    """Refuse `-` and a missing path before it is taken for a dataset name."""
    for spec in inputs:
        if spec == "-":
            raise PacktoolInputError("reading from stdin is not supported (the cache key is the file's "
                                     "bytes); save the data to a file, e.g. `... > data.jsonl`, and "
                                     "pass its path", path="-")
        if is_uri(spec):
            locate(spec)  # an unknown scheme or a URI with credentials: one line, now
            continue
        if hf_flags or os.path.exists(spec) or any(c in spec for c in "*?["):
            continue
        folder = os.path.dirname(spec)
        looks_like_path = (os.path.isabs(spec) or spec.startswith(("./", "../", "~"))
                           or spec.lower().endswith(FILE_SUFFIXES) or (folder != "" and os.path.isdir(folder)))
        if looks_like_path:
            raise PacktoolInputError("input file not found", path=spec)

