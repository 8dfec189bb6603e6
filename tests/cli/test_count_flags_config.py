"""A count or size flag of the right type out of its range is `kind` `config` (README's error
contract: "A value of the right type out of its range (`--tp 0`, `-C -5`) ... `kind` `config`").
Before (S40-7): `verify --max-problems -1` said `kind` `input`, and so did every argument of the
library's one table of ranges (params.RANGES) checked without a class of its own: verify's and
pack's --workers, pack's --shard-tokens and --plan-shard-rows, the datasets' ranks and sizes.

The class: every name of params.RANGES through params.checked (the owner every public call and
config dataclass asks), and each CLI flag that sets one of them, through --json."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from packtool.cli.app import app
from packtool.errors import PacktoolConfigError
from packtool.params import RANGES, checked

T = "/work/shared/data/tokenizers/gpt2/tokenizer.json"


@pytest.mark.parametrize("name", sorted(RANGES))
@pytest.mark.parametrize("side", ["below", "above"])
def test_every_range_argument_out_of_range_is_config(name, side):
    least, most, _ = RANGES[name]
    with pytest.raises(PacktoolConfigError, match=rf"^{name} must be"):
        checked(name, least - 1 if side == "below" else most + 1)


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    import pathlib
    if not pathlib.Path(T).exists():
        pytest.skip("no gpt2 tokenizer")
    d = tmp_path_factory.mktemp("c")
    (d / "a.jsonl").write_text('{"text": "hello world"}\n{"text": "b c d"}\n')
    r = CliRunner().invoke(app, ["pack", str(d / "a.jsonl"), "--tokenizer", T, "-C", "64", "-o", str(d / "out"),
                                 "--cache-dir", str(d / "cache")])
    assert r.exit_code == 0, r.output
    return d


FLAGS = {  # the command (after packtool --json) -> the flag named
    "verify --max-problems -1 (the finding)": (["verify", "{out}", "--max-problems", "-1"], "--max-problems"),
    "verify --workers 0": (["verify", "{out}", "--workers", "0"], "--workers"),
    "pack --workers 0": (["pack", "{src}", "--tokenizer", T, "-C", "64", "-o", "{new}", "--workers", "0"],
                         "--workers"),
    "pack --shard-tokens 0": (["pack", "{src}", "--tokenizer", T, "-C", "64", "-o", "{new}",
                               "--shard-tokens", "0"], "--shard-tokens"),
    "pack --plan-shard-rows -1": (["pack", "{src}", "--tokenizer", T, "-C", "64", "-o", "{new}",
                                   "--plan-shard-rows", "-1"], "--plan-shard-rows"),
}


@pytest.mark.parametrize("case", list(FLAGS))
def test_a_flag_out_of_range_is_config_in_one_line(packed, case):
    args, flag = FLAGS[case]
    args = [a.format(out=packed / "out", src=packed / "a.jsonl", new=packed / "new") for a in args]
    r = CliRunner().invoke(app, ["--json", *args])
    assert r.exit_code == 2, r.output
    err = json.loads(r.stdout)["error"]
    assert err["kind"] == "config" and err["message"].startswith(f"{flag} must be"), err
    assert "Traceback" not in r.output and not (packed / "new").exists()


@pytest.mark.parametrize("name", sorted(RANGES))
def test_a_value_of_another_kind_stays_input(name):
    from packtool.errors import PacktoolInputError
    with pytest.raises(PacktoolInputError, match=rf"^{name} must be"):
        checked(name, True)
