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
TOKENIZER_IDENTITY = ("sha256", "config_sha256", "special_tokens_map_sha256", "template_sha256", "bos_id",
                      "eos_id", "pad_id", "vocab_size", "bos_token", "eos_token", "pad_token")
TOKENIZER_HASHES = ("sha256", "config_sha256", "special_tokens_map_sha256", "template_sha256")
# hashes outputs of older packtool versions lack (absent there is null: nothing was read)
_LATER_HASHES = ("special_tokens_map_sha256",)
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
    if not isinstance(rec, dict):  # parse_manifest refuses it at open (slabs.fields): said here for a record read on its own
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
    if "versions" in rec:  # older outputs have none (FORMAT.md): verify --source says so in a note
        _versions_problems(rec["versions"], bool(manifest.get("side_columns")), bad)
    if "tokenize" in rec:  # older outputs have none (FORMAT.md): verify --source takes the flags alone
        _tokenize_problems(rec["tokenize"], bad)
    tok = manifest.get("tokenizer") or {}
    for key in TOKENIZER_HASHES:  # a key absent is not null: pack writes every one (an edit)
        if tok and (key not in tok and key not in _LATER_HASHES or tok.get(key) is not None
                    and not is_sha256(tok[key])):
            bad(f"tokenizer.{key}", tok.get(key, "absent"), f"null or {SHA256}")
    for key in _TOKENIZER_TEXTS:
        if tok and (key not in tok or tok[key] is not None and not isinstance(tok[key], str)):
            bad(f"tokenizer.{key}", tok.get(key, "absent"), "null or a string")
    return out


# what the fingerprint keys on: the cache format's name and the tokenizers version as text, the
# versions as numbers; the side store's with side columns only
_VERSIONS = {"format": str, "version": int, "tokenizers": str}
_SIDE_VERSIONS = {"side_store": int, "side_values": int}


def _versions_problems(versions, side: bool, bad) -> None:
    if not isinstance(versions, dict):
        bad("input.versions", versions, "an object of version names and numbers")
        return
    for key, kind in {**_VERSIONS, **(_SIDE_VERSIONS if side else {})}.items():
        v = versions.get(key)
        if key not in versions or not isinstance(v, kind) or isinstance(v, bool):
            bad(f"input.versions.{key}", v if key in versions else "absent", "a string" if kind is str else "an integer")


def _tokenize_problems(rec, bad) -> None:
    """Every option of the record present (an absent one would read as its default, not pack's)
    and each text option null or a string; the rest are TokenizeConfig's to check
    (verification.source)."""
    from dataclasses import fields

    from packtool.tokenize.config import TokenizeConfig
    if not isinstance(rec, dict):
        bad("input.tokenize", rec, "an object of tokenize options")
        return
    for f in fields(TokenizeConfig):
        v = rec.get(f.name, "absent")
        if f.name not in rec or (str(f.type) == "str | None" and v is not None and not isinstance(v, str)):
            bad(f"input.tokenize.{f.name}", v, "null or a string" if str(f.type) == "str | None" else "present")


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
