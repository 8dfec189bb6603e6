"""The `datasets` library's cache where packtool makes it write: to_hf's conversion of an
output, and pack's `--split` read of a Hub name or a dataset repo folder through
`datasets.load_dataset` (its Arrow files and locks). One rule for that place, as for every path
packtool writes (`paths.refuse_inside_packed`): never inside a packed output, a tokenized
cache entry or a checkpoint (their readers then refuse the strays), never a folder named `~`
when no home is known, never a file."""
from __future__ import annotations

import os

from packtool.errors import PacktoolConfigError, PacktoolError
from packtool.output.paths import refuse_inside_packed
from packtool.output.relations import input_problem


class ConversionChanged(PacktoolConfigError):
    """to_hf's conversion in the datasets cache changed since datasets wrote it: kind config, as every
    other fault of that place (RB-9: it was kind cache, the README's name for --cache-dir's)."""


def check_datasets_cache(who: str, fix: str, flag: str | None = None, inputs=()) -> None:
    """Refuse, before datasets writes a byte, the cache it would use (HF_DATASETS_CACHE, else
    HF_HOME's, else ~/.cache/huggingface/datasets), kind config whatever the reason (it is the
    environment's setting, or the caller's load_kwargs cache_dir; so are a place datasets cannot
    write below, hf/load.translated, and a conversion changed since, `hold_conversion`). `who`
    opens the line; `fix` is the caller's other way out ("pass load_kwargs cache_dir= a folder"); `flag`: the caller's argument a refusal names where the
    place itself is not the cause. `inputs`: the folders read through datasets; a cache inside
    one, or holding one, is refused as packtool's own cache root is (S48A-2: datasets names its
    folder after the repo, so HF_DATASETS_CACHE holding the repo put its conversions inside it,
    read by the next run's split patterns as rows: the split doubled each run)."""
    import datasets.config
    place = str(datasets.config.HF_DATASETS_CACHE)
    if place.startswith("~"):
        from packtool.env import no_home
        raise PacktoolConfigError(f"{who}: {no_home() or 'HOME names no folder'}, so the datasets cache {place} "
                                  f"would be a folder named '~' here; set HOME (or HF_HOME) to a folder{fix}",
                                  flag=flag)
    refuse_inside_packed(place, "HF_DATASETS_CACHE", itself=True, error=PacktoolConfigError)
    if os.path.lexists(place) and not os.path.isdir(place):
        raise PacktoolConfigError(f"{who}: the datasets cache {place} (HF_DATASETS_CACHE, else HF_HOME's "
                                  f"datasets/) is not a folder; set HF_DATASETS_CACHE to a folder{fix}", flag=flag)
    problem = input_problem(place, [os.fspath(i) for i in inputs])
    if problem:
        raise PacktoolConfigError(f"the datasets cache (HF_DATASETS_CACHE, else HF_HOME's datasets/), where "
                                  f"datasets writes its Arrow conversion of {who}, {problem}; set "
                                  f"HF_DATASETS_CACHE to a folder outside the inputs{fix}", path=place,
                                  flag="HF_DATASETS_CACHE")


# to_hf's conversion of an output, held to the bytes datasets wrote (S48B-6): datasets reuses a
# conversion by its name and hands its rows out as they are, so one changed since (a shared or
# long-lived cache, a disk error, an edit) came back as the output's rows; one cut short was
# datasets' ArrowInvalid, said as a keyword of the caller's it refused. The record lies beside the
# conversion's Arrow files, written once, when to_hf first meets them (datasets' index files,
# `cache-*.arrow`, made by a select on the dataset, are not the conversion's and not held)
RECORD = "packtool-conversion.json"


def _conversion_files(folder: str) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n.endswith(".arrow") and not n.startswith("cache-"))


def _digest(path: str) -> str:
    import xxhash
    h = xxhash.xxh3_128()
    with open(path, "rb") as f:
        while block := f.read(8 << 20):
            h.update(block)
    return h.hexdigest()


def hold_conversion(base: str, record: bool = True) -> None:
    """Refuse a conversion `base`* (the datasets cache's folders of to_hf's conversion name)
    whose Arrow files are not the bytes recorded when to_hf first met them: one line naming the
    folder, with the fix. `record`: write the record where there is none (False once a load
    failed: bytes datasets could not read are never recorded as the conversion's)."""
    import glob
    import json

    from packtool.output.writes import write_file
    # datasets names the folder `<name>-<config id>`, one per config id
    folders = sorted({os.path.dirname(p) for p in glob.glob(glob.escape(base) + "*/**/*.arrow", recursive=True)})
    for folder in folders:
        sums = {n: _digest(os.path.join(folder, n)) for n in _conversion_files(folder)}
        try:
            with open(os.path.join(folder, RECORD), encoding="utf-8") as f:
                said = json.load(f)
        except FileNotFoundError:
            said = None
        except ValueError:  # not the JSON packtool writes: as a changed conversion
            said = {}
        if said is None:
            if record and sums:
                try:
                    with write_file(os.path.join(folder, RECORD), "load_kwargs", checked=True, text=True) as f:
                        json.dump(sums, f)
                except (OSError, PacktoolError):  # a read-only cache, or a concurrent to_hf's record: unheld
                    pass
            continue
        if said != sums:
            what = next((n for n in sorted(set(said) | set(sums)) if said.get(n) != sums.get(n)), RECORD) \
                if isinstance(said, dict) else RECORD
            top = os.path.join(os.path.dirname(base), os.path.relpath(folder, os.path.dirname(base)).split(os.sep)[0])
            raise ConversionChanged(f"to_hf: the datasets cache's conversion of this output no longer holds the "
                                     f"bytes datasets wrote ({what} changed since); remove the folder {top} "
                                     f"(to_hf makes it again from the checked shards)", path=folder)
