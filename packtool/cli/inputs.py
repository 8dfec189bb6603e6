"""Input arguments the command line refuses before any work: stdin (`-`), a missing path that
would otherwise be looked up as a Hugging Face dataset name, and shape flags that contradict
each other (one of them would be silently ignored)."""
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


def check_shape_flags(shape: str | None, prompt_field: str | None, response_field: str | None,
                      text_field: str | None) -> None:
    """Field flags that a forced --shape would ignore are an error, not a silent no-op (under
    auto each file picks its own shape, so --text-field beside --prompt-field is fine)."""
    two = prompt_field is not None or response_field is not None
    if shape in (None, "auto"):  # each file picks its shape: every field flag may apply to one
        return
    if two and shape != "fields":
        raise PacktoolInputError(f"--shape {shape} ignores --prompt-field/--response-field; drop them, "
                                 f"or use --shape fields", flag="--shape")
    if text_field is not None and shape != "text":
        raise PacktoolInputError(f"--shape {shape} ignores --text-field; drop it, or use --shape text",
                                 flag="--shape")
