"""S45A-2 on the Ray engine: its tokenize tasks add a BOS exactly where the local engine does when
tokenizer_config.json says add_bos_token (the driver settles it; the tasks take the settled options),
under the same cache key, for a cache in a folder and on a store."""
from __future__ import annotations

import pytest

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'packtool[ray]')")

import json  # noqa: E402
import shutil  # noqa: E402

from conftest import GPT2, LOCAL_RAY_GROUP  # noqa: E402

from packtool.engines.ray_engine import tokenized_cache  # noqa: E402
from packtool.tokenize.config import TokenizeConfig  # noqa: E402
from packtool.tokenize.pipeline import tokenize_to_cache  # noqa: E402

pytestmark = [LOCAL_RAY_GROUP]
BOS = 50256  # gpt2's <|endoftext|>, the config's bos_token and eos_token


def _folder(tmp_path, add_bos_token: bool) -> str:
    d = tmp_path / "tok"
    d.mkdir()
    shutil.copy(GPT2, d / "tokenizer.json")
    (d / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "add_bos_token": add_bos_token}))
    return str(d)


@pytest.mark.parametrize("add_bos_token,given,want", [(False, None, False), (True, None, True), (False, True, True)],
                         ids=["false", "true", "false, add_bos=True"])
def test_ray_tasks_add_the_bos_the_config_says(tmp_path, local_ray, add_bos_token, given, want):
    cfg = TokenizeConfig(tokenizer=_folder(tmp_path, add_bos_token), add_bos=given)
    _same_as_local(tmp_path, cfg, str(tmp_path / "ray"), want)


@pytest.fixture
def ray_reaches_s3(request, s3):
    """A local Ray whose workers were started with the endpoint's AWS environment (one up before
    `s3` set it would send the tasks' puts elsewhere)."""
    if ray.is_initialized():
        ray.shutdown()
    request.getfixturevalue("local_ray")
    return s3


def test_ray_store_entry_tasks_add_no_bos_when_the_config_says_false(tmp_path, ray_reaches_s3):
    """A store's entry is built by the tasks from engines/ray_store's job, not ray_engine's."""
    folder = _folder(tmp_path, False)
    _same_as_local(tmp_path, TokenizeConfig(tokenizer=folder), ray_reaches_s3 + "/c", False)


def _same_as_local(tmp_path, cfg: TokenizeConfig, root: str, want: bool) -> None:
    src = tmp_path / "t.jsonl"
    src.write_text('{"text": "Hello world"}\n')
    on_ray = tokenized_cache([str(src)], cfg, root)
    local = tokenize_to_cache([str(src)], cfg, str(tmp_path / "local"), progress=False)
    assert on_ray.fingerprint == local.fingerprint
    ids = on_ray.read_rows([0]).input_ids.tolist()
    assert ids == local.read_rows([0]).input_ids.tolist()
    assert (ids[0] == BOS) == want and ids[-1] == BOS  # EOS ends the text row either way
