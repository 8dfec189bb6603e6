"""SlabCollator holds every batch item's side columns to the declarations it is given
(`side_columns=ds.side_columns`: packtool.side.side_values, the SideColumn's own rule): one
row per token of input_ids, the declared width (one value, or a row of K) and a number of the
declared kind. A row cut to K-1 candidates trained silently, a short column was blamed on
cu_seqlens_padded, strings gave numpy's ValueError (S42-6). Each damage, in the second item of
a batch, is refused in one line naming the batch item, the column and what differs; a column
known by name only is held to what needs no declaration (length, numbers, one width per batch).
A declared column's pads hold its fill, bit for bit, as the slab reader holds them (S45B-6)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from side_support import K  # noqa: E402
from side_support import side_output as out  # noqa: E402,F401

from packtool.errors import PacktoolInputError  # noqa: E402
from packtool.hf import SlabCollator, SlabDataset, slab_side_features  # noqa: E402


def _set(name, fn):
    def edit(r):
        r[name] = fn(r[name], r)
    return edit


# damage -> (edit of one item, words of the refusal, also refused by name only)
DAMAGES = {
    "support cut to K-1": (_set("sup", lambda v, r: np.asarray(v)[:, :K - 1]), ["a row of K=4", f"K={K}"], False),
    "support widened to K+1": (_set("sup", lambda v, r: np.pad(np.asarray(v), ((0, 0), (0, 1)), constant_values=-1)),
                               [f"K={K + 1}", f"K={K}"], False),
    "support as one value": (_set("sup", lambda v, r: np.asarray(v)[:, 0]), ["one value per token", f"K={K}"], False),
    "values as rows of 1": (_set("lp", lambda v, r: np.asarray(v)[:, None]), ["a row of K=1", "one value per token"],
                            False),
    "values 3 short": (_set("lp", lambda v, r: list(v)[:-3]), ["rows for", "tokens (input_ids)"], True),
    "values 1 long": (_set("lp", lambda v, r: list(v) + [0.0]), ["rows for", "tokens (input_ids)"], True),
    "support 2 short": (_set("sup", lambda v, r: np.asarray(v)[:-2]), ["rows for", "tokens (input_ids)"], True),
    "strings in a float column": (_set("lp", lambda v, r: ["x"] * len(v)), ["'x'", "float32"], True),
    "None in a float column": (_set("lp", lambda v, r: [None] * len(v)), ["None", "float32"], True),
    "floats in an id column": (_set("sup", lambda v, r: np.asarray(v) + 0.5), ["float64", "int32"], False),
    "bools in an id column": (_set("sup", lambda v, r: np.asarray(v) > 0), ["bool", "int32"], False),
    "an id past int32": (_set("sup", lambda v, r: np.where(np.arange(np.size(v)).reshape(np.shape(v)) == 7,
                                                           2 ** 31 + 5, np.asarray(v, np.int64))),
                         [str(2 ** 31 + 5), "int32"], False),
    "rows of differing widths": (_set("sup", lambda v, r: [list(x) for x in v[:3]] + [list(x)[:2] for x in v[3:]]),
                                 ["differing widths", "token 3 holds 2"], True),
    "a number for the column": (_set("lp", lambda v, r: 1.5), ["1.5", "one row per token"], True),
}


def _first_pad(r) -> int:
    lens, cu = np.asarray(r["seq_lens"]), np.asarray(r["cu_seqlens_padded"])
    s = int(np.flatnonzero(np.diff(cu) > lens)[0])
    return int(cu[s] + lens[s])


def _on_pad(value):
    def put(v, r):
        v = np.array(v, copy=True)
        v[_first_pad(r)] = value
        return v
    return put


# S45B-6: a pad holds the declared fill, bit for bit (the reader's rule); a NaN on a pad reached a
# keep_pads batch from plain `datasets` rows
PAD_DAMAGES = {
    "NaN on a pad": (_set("lp", _on_pad(np.nan)), ["holds nan at slab position", "where its fill is 0.0"], False),
    "-0.0 on a pad": (_set("lp", _on_pad(-0.0)), ["holds -0.0 at slab position", "where its fill is 0.0"], False),
    "a candidate on a pad": (_set("sup", _on_pad(7)), ["'sup' holds [7, 7, 7", "where its fill is -1"], False),
}
DAMAGES.update(PAD_DAMAGES)


def _refused(col, items, words):
    with pytest.raises(PacktoolInputError) as e:
        col(items)
    msg = str(e.value)
    assert "\n" not in msg
    for w in ["SlabCollator: batch item 1: side column", *words]:
        assert w in msg, msg
    return msg


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_side_row_off_its_declaration_is_refused(out, damage):  # noqa: F811
    edit, words, _ = DAMAGES[damage]
    ds = SlabDataset(out)
    bad = dict(ds[1])
    edit(bad)
    _refused(SlabCollator(side_columns=ds.side_columns), [ds[0], bad], words)


@pytest.mark.parametrize("keep_pads", [False, True])
@pytest.mark.parametrize("damage", sorted(PAD_DAMAGES))
def test_a_pad_off_the_declared_fill_is_refused_with_or_without_pads_kept(out, damage, keep_pads):  # noqa: F811
    edit, words, _ = PAD_DAMAGES[damage]
    ds = SlabDataset(out)
    bad = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in ds[1].items()}  # as `datasets` hands it
    edit(bad)
    _refused(SlabCollator(side_columns=ds.side_columns, keep_pads=keep_pads), [ds[0], bad], words)


@pytest.mark.parametrize("damage", sorted(d for d in DAMAGES if DAMAGES[d][2]))
def test_a_column_known_by_name_is_held_to_what_needs_no_declaration(out, damage):  # noqa: F811
    edit, words, _ = DAMAGES[damage]
    ds = SlabDataset(out)
    bad = dict(ds[1])
    edit(bad)
    words = [w.replace("float32", "a number") for w in words]
    _refused(SlabCollator(side_columns=["lp", "sup"]), [ds[0], bad], words)


def test_by_name_one_batch_holds_one_width(out):  # noqa: F811
    ds = SlabDataset(out)
    bad = dict(ds[1])
    bad["sup"] = np.asarray(bad["sup"])[:, :2]
    _refused(SlabCollator(side_columns="lp,sup"), [ds[0], bad], ["a row of K=2", f"batch item 0 a row of K={K}"])


def test_the_findings_example_k_minus_one_names_the_column_and_both_widths(out):  # noqa: F811
    ds = SlabDataset(out)
    r = dict(ds[0])
    r["support_kept"] = None  # an unrelated key is no side column
    r["sup"] = np.asarray(r["sup"])[:, :K - 1]
    with pytest.raises(PacktoolInputError, match=rf"^SlabCollator: batch item 0: side column 'sup' has a row of "
                                                 rf"K={K - 1} per token, the output declares a row of K={K} "):
        SlabCollator(side_columns=ds.side_columns)([r])


def test_the_findings_short_column_is_named_not_the_layout(out):  # noqa: F811
    ds = SlabDataset(out)
    r = dict(ds[0])
    n = r["input_ids"].size
    r["lp"] = list(r["lp"])[:-3]
    with pytest.raises(PacktoolInputError, match=rf"batch item 0: side column 'lp' holds {n - 3} rows for {n} tokens"):
        SlabCollator(side_columns=ds.side_columns)([r])
    with pytest.raises(PacktoolInputError, match=rf"^slab_side_features: values hold {n - 3} rows, "
                                                 rf"cu_seqlens_padded ends at {n}"):
        slab_side_features(r["lp"], r["seq_lens"], r["cu_seqlens_padded"], 0.0)


def _per_token_arrays(rows):
    """`datasets`' numpy format: an object array holding one array per token."""
    a = np.empty(len(rows), object)
    for j, x in enumerate(rows):
        a[j] = np.asarray(x, np.int64)
    return a


def test_rows_as_datasets_hands_them_give_the_same_batch(out):  # noqa: F811
    """Python lists (float64, int64) and per-token arrays are cast to the declaration, as before."""
    ds = SlabDataset(out)
    col = SlabCollator(side_columns=ds.side_columns)
    want = col([ds[0], ds[1]])
    lists = [{k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in ds[i].items()} for i in (0, 1)]
    arrays = [dict(ds[i], sup=_per_token_arrays(ds[i]["sup"])) for i in (0, 1)]
    for items in (lists, arrays):
        got = col(items)
        for k in ("lp", "shift_lp", "sup", "shift_sup", "input_ids", "labels"):
            assert got[k].dtype == want[k].dtype and torch.equal(got[k], want[k]), k
