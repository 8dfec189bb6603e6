"""RA-5 (s49 review): one pattern reads one set with one set of folder rules, locally and on a
store. A dataset repo (data/train-* + data/test-*, or train/ + test/) matched by `DIR/**` or
`DIR/**/*` was refused locally (the folder a glob matches is read whole: its splits judged) and
packed whole on a store, train and test rows, rc 0, no word: every object there matched the
pattern itself, so no prefix was recorded as read whole and the split rule was never asked."""
from __future__ import annotations

import pytest

from packtool.errors import PacktoolInputError
from packtool.storage import locate
from packtool.tokenize.readers import resolve_inputs

LAYOUTS = {"data/train-* + data/test-*": ["data/train-00000.jsonl", "data/test-00000.jsonl"],
           "train/ + test/": ["train/a.jsonl", "test/a.jsonl"],
           "one split": ["data/train-00000.jsonl", "data/train-00001.jsonl"]}
PATTERNS = ["repo/", "repo/*", "repo/**", "repo/**/*", "repo/**/", "repo/**/*.jsonl", "repo/*/*"]


def _verdict(base: str, pattern: str):
    """What the spec reads, as paths below `base`, or 'refused' for the dataset-repo refusal."""
    try:
        got = resolve_inputs([f"{base}/{pattern}"], quiet=True)
    except PacktoolInputError as e:
        assert "dataset repo" in str(e), str(e)
        return "refused"
    return [f.path.split("/repo/", 1)[1] for f in got]


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_repo_glob_reads_the_same_locally_and_on_a_store(tmp_path, s3, layout, pattern):
    for i, rel in enumerate(LAYOUTS[layout]):
        row = b'{"input_ids": [%d, 2, 3]}\n' % i
        (tmp_path / "repo" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "repo" / rel).write_bytes(row)
        locate(f"{s3}/repo/{rel}").write_bytes(row)
    local, store = _verdict(str(tmp_path), pattern), _verdict(s3, pattern)
    assert local == store, (local, store)
    # the file:// store (the suite's and users' stand-in for one) by the same rule: a `**/` it kept
    # the `/` of matched nothing
    assert _verdict(f"file://{tmp_path}", pattern) == local
    if layout == "data/train-* + data/test-*" and pattern in ("repo/", "repo/**", "repo/**/*", "repo/**/"):
        assert store == "refused"  # every split of a repo, test rows too: never silently
