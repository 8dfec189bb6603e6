"""Inputs that hold the same rows under two names: said, never refused.

One file reached twice (two spellings, a hard link, a link) is read once (`repeats.refuse_repeats`:
refused when the user typed it twice, read once with a note where found inside folders or globs). Two files with the same bytes are not one file: a `cp`
copy left in a folder, or `X` beside the `X.gz` that `gzip -k` / `zstd` leave (they keep the
source), were all read, their rows packed two or three times without a word (S46A-13). A copy can
be deliberate (upsampling a source by copying it), so this is a note naming each pair, made from
what the cache key hashes anyway (`request.input_digests`: every input's xxh3-128, on both
engines), so it costs no read.
"""
from __future__ import annotations

from packtool.notes import note
from packtool.tokenize.readers import InputFile

# what a compressor that keeps its source appends to the name (gzip -k, zstd, bzip2 -k)
_COMPRESSED = (".gz", ".zst", ".zstd", ".bz2")


def note_same_inputs(files: list, digests: list[str]) -> None:
    """One note per input that repeats an earlier one: the same bytes, or the same name plus a
    compressor's suffix (its compressed copy: the bytes differ, the rows do not)."""
    first: dict[str, str] = {}
    paths = {f.path for f in files if isinstance(f, InputFile)}
    for f, d in zip(files, digests):
        if not isinstance(f, InputFile):  # an in-memory dataset: no name to give
            continue
        path = f.path
        if d in first:
            said = f"has the same bytes as {first[d]}"
        else:
            first[d] = path
            src = next((path[:-len(c)] for c in _COMPRESSED if path.lower().endswith(c)), None)
            if src is None or src not in paths:
                continue
            said = f"is named as a compressed copy of {src} (gzip -k and zstd keep the source beside it)"
        note(f"{path} {said}: its rows are packed twice; pass one of them, or keep both to upsample")


__all__ = ["note_same_inputs"]
