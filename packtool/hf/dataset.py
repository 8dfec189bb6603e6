"""`SlabDataset`: a packed output's slabs as a map-style torch dataset, each rank's own in the
order the package's DP rules give (hf/dp.py), read through `slabs.reader`, and `to_hf`, the
same items as a `datasets` dataset (hf/load.py).
"""
from __future__ import annotations

import os

import numpy as np
from torch.utils.data import Dataset

from packtool.errors import PacktoolConfigError, PacktoolInputError
from packtool.free_memory import out_of_memory
from packtool.hf.dp import dp_order, repeats_said
from packtool.params import checked, position, switch
from packtool.side import SideColumn
from packtool.slabs.format import SlabManifest
from packtool.slabs.reader import SlabIndex, SlabReader


class SlabDataset(Dataset):
    """A packed output's slabs as map-style torch dataset items, each a dict of the slab's columns that `SlabCollator`
    reads: `input_ids`, `loss_mask`, `seq_lens`, `cu_seqlens_padded` (numpy arrays).

    Reads go through `slabs.reader` (bounded memory: at most `row_group_cache` decoded row
    groups per process); a DataLoader worker opens its own files."""

    def __init__(self, path: str, rank: int | None = None, world_size: int = 1,
                 per_device_batch: int = 1, row_group_cache: int = 2):
        rank, world_size, per_device_batch, row_group_cache = (
            checked(k, v, PacktoolConfigError) for k, v in (("rank", rank), ("world_size", world_size),
                                                            ("per_device_batch", per_device_batch),
                                                            ("row_group_cache", row_group_cache)))
        self.path = path
        self.manifest = SlabManifest.read(path)
        self.index = SlabIndex.build(self.manifest)
        self.order = dp_order(self.index, self.manifest.dp, world_size, rank, per_device_batch)
        self.rank, self.world_size, self.per_device_batch = rank, world_size, per_device_batch
        self._say_repeats()
        # the output's side columns: pass them on, `SlabCollator(side_columns=ds.side_columns)`
        self.side_columns: tuple[SideColumn, ...] = self.manifest.side_columns
        self._cache = row_group_cache
        self._reader: SlabReader | None = None
        self._pid = -1

    def _say_repeats(self) -> None:
        """By rank 0 (rank None: every rank's, here), whose log is read: the same line on every rank
        was N lines for N ranks."""
        said = repeats_said(self.path, self.index, self.manifest.dp, self.world_size, self.per_device_batch)
        if said:
            from packtool.notes import job_note  # on stderr and kept (notes.NOTES, --json), as every note
            job_note(said, self.rank)

    def __len__(self) -> int:
        return int(self.order.size)

    @property
    def loss_tokens(self) -> int:
        return int(self.index.num_loss_tokens[self.order].sum())

    def _read(self) -> SlabReader:
        if self._reader is None or self._pid != os.getpid():  # file handles are per process
            self._reader = SlabReader(self.manifest, self.index, cache=self._cache)
            self._pid = os.getpid()
        return self._reader

    def to_hf(self, streaming: bool = False, **load_kwargs):
        """The same items, in the same order, as a `datasets` dataset (TRL's SFTTrainer takes
        nothing else). streaming=False: a `datasets.Dataset` of the shards (every row group
        checked first as this dataset's rows are, then converted once into the `datasets`
        cache, `load_kwargs` go to `load_dataset`) in this order;
        True: a `datasets.IterableDataset` reading through this dataset, no copy (the
        trainer needs `max_steps`)."""
        streaming = switch("streaming", streaming, PacktoolConfigError)  # before the optional import
        if streaming and load_kwargs:  # they would go nowhere: read through this dataset
            raise PacktoolConfigError(f"to_hf(streaming=True) reads through this dataset, no load_dataset: "
                                      f"load_kwargs {', '.join(load_kwargs)} would be ignored; drop them or pass "
                                      f"streaming=False", path=self.path, flag="load_kwargs")
        from packtool.hf.load import check_load_kwargs, loaded_as_checked
        check_load_kwargs(load_kwargs)  # before the shards are hashed
        try:
            import datasets
        except ImportError as e:  # an optional dependency: the rest of packtool.hf works without it
            raise PacktoolConfigError(f"to_hf needs the `datasets` package ({e}); pip install 'packtool[hf]'") from None
        if streaming:
            return datasets.IterableDataset.from_generator(_items, gen_kwargs={"ds": self})
        from packtool.slabs.check import check_checksum
        # `datasets` reads every byte and hands its rows out unchecked: every check a row of
        # __getitem__ passes first (each shard's checksum, every row group), one group at a time
        checked = {shard for (shard, _), _ in SlabReader(self.manifest, self.index, cache=1).groups()}
        with self.manifest.reading():
            for i in sorted(set(range(len(self.manifest.shards))) - checked):  # a shard of no rows: hashed all the same
                check_checksum(self.manifest, i)
        # only shards holding slabs: datasets' parquet builder fails on a file of no row group (a
        # listed shard of 0 rows, which every reader reads as nothing), blamed on a replaced output
        files = [self.manifest.shard_path(i) for i in sorted(checked) or range(len(self.manifest.shards))]
        return loaded_as_checked(self.manifest, files, load_kwargs,
                                 lambda full: full.select_columns(list(self._columns())).select(self.order))

    def __getitem__(self, i: int | slice) -> dict:
        """Slab `i` (an integer, negative from the end; params.position) as a dict of arrays;
        a slice, as `datasets.Dataset` answers one (`to_hf()[1:3]`): a dict of lists, one
        value per slab."""
        if isinstance(i, slice):
            try:
                span = range(*i.indices(len(self)))
            except (TypeError, ValueError) as e:  # ds[1.5:], ds[::0]
                raise PacktoolInputError(f"SlabDataset[{i.start}:{i.stop}:{i.step}]: {e}; a slice takes "
                                         f"integers and a nonzero step", path=self.path) from None
            items = [self._item(j) for j in span]
            return {k: [it[k] for it in items] for k in (items[0] if items else self._columns())}
        return self._item(position("i", i, len(self), "slab", path=self.path))

    def _columns(self) -> tuple[str, ...]:
        return ("input_ids", "loss_mask", "seq_lens", "cu_seqlens_padded", *(c.name for c in self.side_columns))

    def _item(self, i: int) -> dict[str, np.ndarray]:
        reader, j = self._read(), int(self.order[i])
        row = reader.row(j)
        try:  # copies: the reader's arrays are views of a row group it may evict before collation
            return {"input_ids": row.input_ids.copy(), "loss_mask": row.loss_mask.copy(),
                    "seq_lens": row.seq_lens.copy(),
                    "cu_seqlens_padded": np.concatenate(([0], np.cumsum(row.seg_padded))),
                    **{k: v.copy() for k, v in row.side.items()}}
        except MemoryError as e:
            shard = reader.manifest.shard_path(int(reader.index.shard[j]))
            raise out_of_memory(e, f"{shard} row group {int(reader.index.row_group[j])}",
                                f"copying out SlabDataset item {i}, slab {j} of {row.input_ids.size:,} tokens",
                                "the file", "raise the limit, or run on a machine with more memory)",
                                path=shard) from None


def _items(ds: SlabDataset):
    for i in range(len(ds)):
        yield ds[i]
