"""The `datasets` library's cache where packtool makes it write: to_hf's conversion of an
output, and pack's `--split` read of a Hub name or a dataset repo folder through
`datasets.load_dataset` (its Arrow files and locks). One rule for that place, as for every path
packtool writes (`paths.refuse_inside_packed`): never inside a packed output, a tokenized
cache entry or a checkpoint (their readers then refuse the strays), never a folder named `~`
when no home is known, never a file."""
from __future__ import annotations

import os

from packtool.errors import PacktoolConfigError
from packtool.output.paths import refuse_inside_packed
from packtool.output.relations import input_problem


def check_datasets_cache(who: str, fix: str, flag: str | None = None, inputs=()) -> None:
    """Refuse, before datasets writes a byte, the cache it would use (HF_DATASETS_CACHE, else
    HF_HOME's, else ~/.cache/huggingface/datasets), kind config whatever the reason (it is the
    environment's setting). `who` opens the line; `fix` is the caller's other way out ("pass
    load_kwargs cache_dir= a folder"); `flag`: the caller's argument a refusal names where the
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
