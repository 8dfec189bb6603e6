"""The manifest's provenance record, part of the format (slabs/format.py owns the rest of the
manifest): where the slabs came from. `input` (the input fingerprint, each input file's path,
size and sha256, the tokenization options, the versions the fingerprint keys on), the
tokenizer's identity (`tokenizer`'s hashes, ids and tokens) and `packtool_version`.

No consumer reads it to use the slabs, so consumers do not check it; `verify` checks its form
(`provenance_problems`), and `verify --source`, which re-reads the inputs, its values
(verification/source.py compares them through `recorded_files` and the field lists here).
FORMAT.md, ".manifest.json", says which field is checked how.
"""
from __future__ import annotations

import re

_HEX64 = re.compile(r"^[0-9a-f]{64}\Z")
SHA256 = "64 lowercase hex digits (a sha256)"
# The tokenizer block's fields the input fingerprint covers (its content hashes and ids; the
# tokens and vocabulary follow from the content): the same fingerprint, the same values.
TOKENIZER_IDENTITY = ("sha256", "config_sha256", "template_sha256", "bos_id", "eos_id", "pad_id",
                      "vocab_size", "bos_token", "eos_token", "pad_token")
_TOKENIZER_HASHES = ("sha256", "config_sha256", "template_sha256")
_TOKENIZER_TEXTS = ("path", "chat_template", "bos_token", "eos_token", "pad_token")
# Options that do not change the fingerprint (row groups; paths whose content hashes it keys on)
NOT_IN_FINGERPRINT = ("batch_size", "tokenizer", "chat_template")


def is_sha256(v) -> bool:
    return isinstance(v, str) and bool(_HEX64.match(v))


def recorded_files(manifest: dict) -> list[tuple]:
    """`input.files` as (path, bytes, sha256) triples (None where the input is a dataset object,
    which has neither), once `provenance_problems` found nothing wrong with them."""
    return [tuple(f) for f in (manifest.get("input") or {}).get("files") or []]


def provenance_problems(manifest: dict) -> list[str]:
    """One line per field of the provenance record whose form is not what `pack` writes. A
    well-formed value that was edited is not found here: only the source can tell."""
    out: list[str] = []

    def bad(field: str, v, want: str) -> None:
        out.append(f"the manifest's {field} is {v!r}, not {want}; the manifest is edited or damaged: "
                   f"re-run `packtool pack`")

    if not isinstance(manifest.get("packtool_version"), str):
        bad("packtool_version", manifest.get("packtool_version"), "a version string")
    rec = manifest.get("input")
    if not isinstance(rec, dict):  # _check_types refuses a non-object; a missing one is said here
        bad("input", rec, "the input record pack writes")
        return out
    if not is_sha256(rec.get("fingerprint")):
        bad("input.fingerprint", rec.get("fingerprint"), SHA256)
    files = rec.get("files")
    if not isinstance(files, list):
        bad("input.files", files, "a list of [path, bytes, sha256]")
    else:
        for i, f in enumerate(files):
            _file_problems(f"input.files[{i}]", f, bad)
    versions = rec.get("versions")  # older outputs have none
    if versions is not None and not (isinstance(versions, dict) and all(
            isinstance(k, str) and isinstance(v, (str, int)) and not isinstance(v, bool)
            for k, v in versions.items())):
        bad("input.versions", versions, "an object of version names and numbers")
    tok = manifest.get("tokenizer") or {}
    for key in _TOKENIZER_HASHES:
        if tok.get(key) is not None and not is_sha256(tok[key]):
            bad(f"tokenizer.{key}", tok[key], f"null or {SHA256}")
    for key in _TOKENIZER_TEXTS:
        if tok.get(key) is not None and not isinstance(tok[key], str):
            bad(f"tokenizer.{key}", tok[key], "null or a string")
    return out


def _file_problems(field: str, f, bad) -> None:
    if not (isinstance(f, list) and len(f) == 3):
        bad(field, f, "a [path, bytes, sha256] triple")
        return
    path, size, digest = f
    if not isinstance(path, str) or not path:
        bad(f"{field} path", path, "a path")
    if size is not None and not (isinstance(size, int) and not isinstance(size, bool) and size >= 0):
        bad(f"{field} bytes", size, "null or a byte count")
    if digest is not None and not is_sha256(digest):
        bad(f"{field} sha256", digest, f"null or {SHA256}")
