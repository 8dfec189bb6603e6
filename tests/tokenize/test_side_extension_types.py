"""S49B-6: a K-wide side column held as `datasets.Array2D(shape=(None, K))` (the datasets feature
for a fixed-width row per token) was refused at every door as "holds extension<...Array2DExtensionType>,
not a list per row", with no fix. The extension's storage is the list of K-long lists per row
packtool reads: every door (the datasets object, its save_to_disk folder, its Parquet and Arrow
files, the CLI) packs it to the same slabs as the plain nested list, value for value. An extension
type whose storage is no list is still refused, naming the type the user wrote."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pytest

datasets = pytest.importorskip("datasets")

from side_support import K, check_output, side_rows  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from packtool.align import Alignment  # noqa: E402
from packtool.cli.app import app  # noqa: E402
from packtool.errors import PacktoolInputError  # noqa: E402
from packtool.packing import pack  # noqa: E402
from packtool.planning.core import PackingConfig  # noqa: E402
from packtool.tokenize.config import TokenizeConfig  # noqa: E402

CFG = TokenizeConfig(shape="tokens", side_columns=("lp",), support_columns=("sup",))


@pytest.fixture(scope="module")
def rows():
    ids, lp, sup = side_rows(n=24, seed=3, long=300)
    keep = [i for i, r in enumerate(ids) if r.size > 1]  # a one-token row trains nothing (S45A-7)
    ids, lp, sup = ([c[i] for i in keep] for c in (ids, lp, sup))
    mask = [(np.asarray(s) != -1).any(axis=1).astype(np.int64) for s in sup]
    feat = datasets.Features({"input_ids": datasets.Sequence(datasets.Value("int32")),
                              "loss_mask": datasets.Sequence(datasets.Value("int64")),
                              "lp": datasets.Sequence(datasets.Value("float32")),
                              "sup": datasets.Array2D(shape=(None, K), dtype="int32")})
    ds = datasets.Dataset.from_dict({"input_ids": ids, "loss_mask": mask, "lp": lp, "sup": sup}, features=feat)
    assert isinstance(ds.data.table.column("sup").type, pa.ExtensionType)
    return ids, lp, sup, ds


def _door(name: str, ds, tmp) -> str | object:
    if name == "object":
        return ds
    if name == "save_to_disk":
        ds.save_to_disk(str(tmp / "saved"))
        return str(tmp / "saved")
    if name == "parquet":
        ds.to_parquet(str(tmp / "rows.parquet"))
        return str(tmp / "rows.parquet")
    feather.write_feather(ds.data.table, str(tmp / "rows.arrow"))  # the extension kept in the file's schema
    return str(tmp / "rows.arrow")


@pytest.mark.parametrize("door", ["object", "save_to_disk", "parquet", "arrow"])
def test_array2d_support_packs_as_the_nested_list(tmp_path, rows, door):
    ids, lp, sup, ds = rows
    out = str(tmp_path / "out")
    pack([_door(door, ds, tmp_path)], Alignment(tp=2, capacity=128), PackingConfig("bfd", overflow="split"), CFG,
         output=out, cache_dir=str(tmp_path / "cache"), shard_tokens=1024)
    assert check_output(out, ids, lp, sup) >= 0


def test_array2d_support_by_the_cli(tmp_path, rows, monkeypatch):
    ids, lp, sup, ds = rows
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["pack", _door("save_to_disk", ds, tmp_path), "--side-columns", "lp",
                                 "--support-columns", "sup", "-C", "128", "--overflow", "split",
                                 "-o", "out", "--cache-dir", "cache", "-q"])
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    assert check_output(str(tmp_path / "out"), ids, lp, sup) >= 0


class _Tag(pa.ExtensionType):
    def __init__(self):
        super().__init__(pa.int64(), "test.tag")

    def __arrow_ext_serialize__(self):
        return b""

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type, serialized):
        return cls()


def test_an_extension_over_no_list_is_refused_naming_it(tmp_path):
    t = pa.table({"input_ids": pa.array([[1, 2], [3, 4]], pa.list_(pa.int32())),
                  "lp": pa.ExtensionArray.from_storage(_Tag(), pa.array([1, 2], pa.int64()))})
    with pytest.raises(PacktoolInputError) as e:
        pack([t], Alignment(capacity=64), PackingConfig(), TokenizeConfig(shape="tokens", side_columns=("lp",)),
             dry_run=True)
    said = str(e.value)
    assert "side column lp" in said and "extension<test.tag" in said and "not a list per row" in said, said
