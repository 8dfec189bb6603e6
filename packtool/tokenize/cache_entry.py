"""A tokenized cache entry's format and its trust: what the folder holds and how each file is
vouched for, read by every reader and writer of an entry (tokenize.cache opens and checks a
whole entry over this and re-exports all of it; the flat store, the Ray engine and the store
mirror ask here too).

The names: cache.json, data/ (cache_parts.DATA_DIR), flat/ and its token and side column
files; the format's name and version, and the side column layout's (`SIDE_STORE`). cache.json
read whole, bounded (storage.read_small), and written in one rename. Trust: cache.json records
every file's size and xxh3-128 (`cache_checksums`); `file_problem` says why one file is not
what it records; cache.json itself carries the xxh3-128 of its own content (`SEAL`), so a
hand-edited count, input hash, tokenizer or side column declaration is refused as the files
are, never fed into a pack. `CacheDamagedError` is every refusal of an entry whose files or
cache.json do not hold; `entry_problem` says why a whole entry must not be reused. An entry on
a store is read within `entry_reads`: a store that stops answering names --cache-dir, and is
never taken for damage.
"""
from __future__ import annotations

import json
import os
import re

from packtool.errors import PacktoolCacheError, PacktoolError
from packtool.storage import file_size, is_file, is_uri, join_uri, locate, reading
from packtool.tokenize.cache_parts import CHECKSUM_ALG, DATA_DIR, file_record
from packtool.tokenize.checksum import fast_digest, file_digest

CACHE_FORMAT = "packtool-tokenized-cache"
CACHE_JSON_BYTES = 256 << 20  # read whole (storage.read_small): one record per input file and part
CACHE_VERSION = 12  # 2: content-keyed, every file checksummed; 3: null loss_mask = all targets;
# 4: chat weight 0 honoured; 5: readers refuse rows they passed over (data after a .json array, a CSV
# quote never closed, an Arrow stream without its end marker): an entry of such a file held fewer rows
# 6: a chat row holding U+E000/U+E001 (the generation markers) in any value is refused: a name, tool or
# document holding them had been made loss (or its loss lost)
# 7: under prefix rendering an assistant turn with tool calls is loss (it had none)
# 8: a chat or ShareGPT turn of only whitespace is an empty turn, as "" is (it was trained on)
# 9: booleans in input_ids or labels are refused (an entry held them as ids 1/0, trained on)
# 10: a labeled row whose only target is its first token is all masked (S45A-7: an entry held it, and
# pack counts every row of one token it holds as one that trains nothing)
# 11: assistant_masks / completion_mask are loss columns (S47A-6: an entry held every token a target)
# 12: stops 48-49 changed rules without a bump (JSON numbers beyond float64 refused at every door, TRL's
# two masks read as their AND; a number beyond float64 in a row's JSON text, RA-4); from here tests/tokenize/test_cache_rules_record.py holds the version to
# what a corpus of entries holds, one case per rule (tests/cache_rules_corpus.py)
FLAT_DIR = "flat"
FLAT_FILES = ("tokens.i32", "offsets.npy")  # flat_tokens.py's files, as cache.json names them


_PART = re.compile(r"part-\d{5,}\.parquet")  # cache_parts' part names
_NAMES_CACHE = re.compile(rb'"format"\s*:\s*"' + CACHE_FORMAT.encode() + rb'"')


def packtool_entry(cache_json, data_names, flat_names) -> bool:
    """Whether a folder holding `cache_json` (a path or Location) beside data/ or flat/ (the
    names in each) is an entry packtool wrote, for a reader that would pass it over as
    packtool's (tokenize.own_trees): only on proof, since cache.json beside data/ is a
    downloader's or scraper's layout too (S48A-16): the entry's own part or flat store names,
    or a cache.json naming the format (read bounded; a damaged entry keeps its parts)."""
    if any(_PART.fullmatch(n) for n in data_names) or any(n in FLAT_FILES for n in flat_names):
        return True
    from packtool.storage import SETTINGS_BYTES, read_small
    try:
        return _NAMES_CACHE.search(read_small(cache_json, SETTINGS_BYTES, "cache.json", "")) is not None
    except (OSError, ValueError):  # over the bound, unreadable: not taken for packtool's on a guess
        return False


# the argument every store cache entry comes from (--cache-dir / cache_dir=): a store that stops
# answering at any of its requests, reads as writes, is the cache's refusal naming it, never a
# damaged entry (whose fix deletes a good shared one) nor an input's
CACHE_ARGUMENT = "cache_dir"


def entry_reads(root: str):
    """The block in which the cache entry `root` is read: on a store, each request below it
    names --cache-dir (storage.reading); a local folder, nothing. Every reader of an entry
    (cache.json, the parts' footers and row groups, flat/, the checksums) reads within it,
    in the driver or in the task that reads."""
    return reading(root, CACHE_ARGUMENT)


# The layout of side columns in flat/, in the key and in cache.json of every cache that has
# them: 2 keeps K-wide rows sparse (tokenize/side_store.py), so a cache of layout 1 (dense
# rows) has another key and, found anyway, is refused, never read as sparse.
SIDE_STORE = 2


def side_file(k: int) -> str:
    """Side column k's values in flat/ (cache.json `side_columns`, in order), in the order of
    tokens.i32: width 1, one value of its dtype per token; width K, each token's values up to
    its last non-fill one (tokenize/side_store.py). Numbered, not named: a column's name is
    the user's, a file name is packtool's."""
    return f"side-{k:03d}.bin"


def side_files(k: int, width: int) -> tuple[str, ...]:
    """Every file of side column k in flat/: its values; for width K > 1 then its per-token
    counts and its block index (side_store.SparseRowsWriter's order)."""
    base = side_file(k)[:-4]
    return (side_file(k),) if width == 1 else (side_file(k), f"{base}.cnt", f"{base}.idx")


class CacheDamagedError(PacktoolCacheError):
    """A tokenized cache whose files do not match what cache.json recorded (or whose
    cache.json cannot be read). The pipeline rebuilds such a cache; a caller that opened one
    directly gets this error, naming the cache and the fix."""


# cache.json's checksum of its own content: the file records describe the data, but the counts,
# the inputs' hashes, the tokenizer and the side columns' dtypes are read from cache.json alone
SEAL = "cache_json_xxh3_128"


def _seal_of(meta: dict) -> str:
    """xxh3-128 of every key but the seal, in a canonical form (key order and whitespace are
    no edit of the content)."""
    import xxhash
    body = {k: v for k, v in meta.items() if k != SEAL}
    return xxhash.xxh3_128_hexdigest(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())


def cache_json_bytes(meta: dict) -> bytes:
    """cache.json's bytes, sealed (`meta` gets its seal): every writer of an entry's
    cache.json, local or on a store, writes these."""
    meta[SEAL] = _seal_of(meta)
    return (json.dumps(meta, indent=1, sort_keys=False) + "\n").encode()


def write_cache_json(directory: str, meta: dict) -> None:
    """cache.json, replaced in one rename (a reader sees the old or the new file, whole)."""
    from packtool.output.files import write_file
    data = cache_json_bytes(meta)
    with write_file(os.path.join(directory, "cache.json"), "cache_dir", replace=True, manifest=True) as f:
        f.write(data)


def read_cache_json(directory: str) -> dict:
    try:
        from packtool.storage import read_small
        with entry_reads(directory):
            where = locate(directory).join("cache.json") if is_uri(directory) else os.path.join(directory, "cache.json")
            meta = json.loads(read_small(where, CACHE_JSON_BYTES, "cache.json", "delete the folder and re-run (it is "
                                         "rebuilt)", err=CacheDamagedError).decode("utf-8"))
    except PacktoolError:  # over its bound (said with the size), or a store that did not answer: no damage
        raise
    except (OSError, ValueError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise CacheDamagedError(f"cache.json cannot be read ({type(e).__name__}); delete the "
                                f"folder and re-run (it is rebuilt)", path=directory) from None
    if not isinstance(meta, dict):
        raise CacheDamagedError("cache.json is not a JSON object; delete the folder and re-run",
                                path=directory)
    if meta.get(SEAL) != _seal_of(meta):
        why = "has no checksum of its own (an older packtool wrote it)" if SEAL not in meta else \
            "was changed after packtool wrote it (its own checksum differs)"
        raise CacheDamagedError(f"cache.json {why}; delete the folder and re-run (it is rebuilt)",
                                path=directory)
    return meta


# ---------------------------------------------------------------- checksums

def cache_checksums(root: str, parts: list[dict], known: dict | None = None) -> dict:
    """Records of the Parquet parts and, when present, the flat store under `root`, keyed by
    path relative to `root`; `known` holds records already computed (the flat tokens,
    hashed while they were written)."""
    known = known or {}
    names = [f"{DATA_DIR}/{p['file']}" for p in parts]
    if all(os.path.exists(os.path.join(root, FLAT_DIR, n)) for n in FLAT_FILES):
        names += [f"{FLAT_DIR}/{n}" for n in FLAT_FILES]
    names += [n for n in known if n not in names]  # the side columns' files
    return {n: known.get(n) or file_record(os.path.join(root, n)) for n in names}


def file_problem(root: str, name: str, rec) -> str | None:
    """Why one recorded file of the cache at `root` (a folder or a store entry) is not what
    cache.json says; None when its size and xxh3-128 match. A store that does not answer is no
    problem of the file: raised, naming --cache-dir (in the Ray engine's check tasks too)."""
    path = join_uri(root, *name.split("/"))
    if not isinstance(rec, dict) or not isinstance(rec.get("bytes"), int) or CHECKSUM_ALG not in rec:
        return f"cache.json's record of {name} is damaged"
    with entry_reads(root):
        if not is_file(path):
            return f"{name} is missing"
        size = file_size(path)
        if size != rec["bytes"]:
            return f"{name} has {size} bytes, cache.json says {rec['bytes']}"
        # an object streamed once, xxh3 alone (fast_digest also keeps its sha256 for the cache key)
        if (file_digest(path, CHECKSUM_ALG) if is_uri(path) else fast_digest(path)) != rec[CHECKSUM_ALG]:
            return f"{name} does not match its checksum (changed bytes)"
    return None


def _check_serially(root: str, records: list[tuple[str, dict]]) -> str | None:
    for name, rec in records:
        problem = file_problem(root, name, rec)
        if problem:
            return problem
    return None


def entry_problem(root: str, fingerprint: str | None = None, check=None) -> str | None:
    """`tokenize.cache.cache_problem` less its last step (the entry opened as a TokenizedCache):
    why the entry at `root` must not be reused, from cache.json and each recorded file
    re-hashed; None when they hold. `check(root, [(name, record)])`: the first problem of those
    files (the Ray engine spreads it). A store that does not answer is raised, naming --cache-dir."""
    with entry_reads(root):
        return _problem(root, fingerprint, check or _check_serially)


def _problem(root: str, fingerprint: str | None, check) -> str | None:
    try:
        meta = read_cache_json(root)
    except CacheDamagedError as e:  # the reason alone: the caller's line names the entry and the fix
        return str(e).partition(": ")[2].partition("; ")[0] or "cache.json cannot be read"
    if meta.get("format") != CACHE_FORMAT or meta.get("version") != CACHE_VERSION:
        return "cache.json is of another format or version"
    if fingerprint is not None and meta.get("fingerprint") != fingerprint:
        return "cache.json belongs to other inputs or options (fingerprint differs)"
    from packtool.tokenize.blank_lines import uncounted
    if (why := uncounted(meta.get("inputs"))) is not None:
        return why
    sums, parts = meta.get("checksums"), meta.get("parts")
    if not isinstance(sums, dict) or not isinstance(parts, list):
        return "cache.json has no checksums"
    try:
        names = [f"{DATA_DIR}/{p['file']}" for p in parts]
    except (TypeError, KeyError):
        return "cache.json's list of parts is damaged"
    flat_only = meta.get("token_lists", "parts") == "flat"
    for n in FLAT_FILES:  # absent: rebuilt from the Parquet (unless only flat/ holds the tokens)
        name = f"{FLAT_DIR}/{n}"
        if flat_only or is_file(join_uri(root, FLAT_DIR, n)):
            if name not in sums:
                return f"{name} has no checksum in cache.json"
            names.append(name)
    side = meta.get("side_columns")
    for k, e in enumerate(side if isinstance(side, list) else ()):  # only flat/ holds them
        width = e.get("width", 1) if isinstance(e, dict) else 1
        for n in side_files(k, width if isinstance(width, int) and width >= 1 else 1):
            name = f"{FLAT_DIR}/{n}"
            if name not in sums:
                return f"{name} has no checksum in cache.json"
            names.append(name)
    return check(root, [(name, sums.get(name)) for name in names]) or None
