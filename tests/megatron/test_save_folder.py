"""S35-5: a file in --save is a checkpoint only if it is one (a torch.save file holding
save_checkpoint's record), not by its name: a user's `mp_rank_NN.pt` is never replaced, with
--overwrite or in the --load folder; and a checkpoint set is replaced as a whole: a rank file
the run does not write (it would stay beside the new checkpoint) is refused, in --save and in
--load alike."""
from __future__ import annotations

import shutil

import pytest
import torch

pytest.importorskip("megatron.core")
pytest.importorskip("typer")
from megatron_runs import one_step_run  # noqa: E402, F401  (the module's fixture)
from typer.testing import CliRunner  # noqa: E402

from packtool.errors import PacktoolError  # noqa: E402
from packtool.megatron.checkpoint import check_save  # noqa: E402
from packtool.megatron.loop import TrainConfig, train  # noqa: E402
from packtool.megatron.model import GPTShape  # noqa: E402

# the shape of one_step_run's checkpoint (megatron_runs.py), and of the runs that replace it
SHAPE = GPTShape(layers=1, hidden=32, heads=2, ffn=64, vocab=128, max_seq=512)


@pytest.fixture(scope="module")
def app():
    from packtool.cli.app import app as packtool_app
    return packtool_app


# what the --save folder holds besides nothing: {name: content}; "CK" is a real checkpoint
FOLDERS = {
    "a text file named rank 0": ({"mp_rank_00.pt": b"user data\n"}, "holds mp_rank_00.pt, not a checkpoint"),
    "a text file named rank 7": ({"mp_rank_07.pt": b"my thesis\n"}, "holds mp_rank_07.pt, not a checkpoint"),
    "another torch file": ({"mp_rank_00.pt": "TORCH"}, "holds mp_rank_00.pt, not a checkpoint"),
    "a checkpoint and a text file": ({"mp_rank_00.pt": "CK", "mp_rank_01.pt": b"x"}, "holds mp_rank_01.pt, not a"),
    "a checkpoint of rank 7 beside rank 0": ({"mp_rank_00.pt": "CK", "mp_rank_07.pt": "CK"},
                                             "holds mp_rank_07.pt, of a run of more tensor-parallel ranks"),
}


def _fill(folder, files, good):
    folder.mkdir()
    for name, content in files.items():
        if content == "CK":
            shutil.copyfile(good, folder / name)
        elif content == "TORCH":
            torch.save({"weights": torch.zeros(2)}, folder / name)
        else:
            (folder / name).write_bytes(content)
    return {n: (folder / n).read_bytes() for n in files}


def _save_paths(data, sv, app):
    cli = ["train", data, "--device", "cpu", "--steps", "1", "--layers", "1", "--hidden", "32", "--heads", "2"]
    return {
        "check_save --overwrite": lambda: check_save(str(sv), None, True),
        "check_save, resuming": lambda: check_save(str(sv), str(sv), False),
        "train overwrite": lambda: train(TrainConfig(data_dir=data, shape=SHAPE, steps=1, quiet=True, save=str(sv),
                                                     overwrite=True)),
        "cli --overwrite": lambda: CliRunner().invoke(app, [*cli, "--save", str(sv), "--overwrite"]),
        "cli, no --overwrite": lambda: CliRunner().invoke(app, [*cli, "--save", str(sv)]),
    }


@pytest.mark.parametrize("path", ["check_save --overwrite", "check_save, resuming", "train overwrite",
                                  "cli --overwrite", "cli, no --overwrite"])
@pytest.mark.parametrize("case", FOLDERS)
def test_save_replaces_only_a_whole_set_of_checkpoints(one_step_run, tmp_path, app, path, case):
    data, good = one_step_run
    files, said = FOLDERS[case]
    sv = tmp_path / "sv"
    before = _fill(sv, files, good)
    if path == "cli, no --overwrite" and "of a run of more" in said:
        said = "holds checkpoint files"  # the first thing to say: replacing needs --overwrite
    try:
        got = _save_paths(data, sv, app)[path]()
    except PacktoolError as e:
        msg, code = str(e), e.exit_code
    else:
        msg, code = " ".join(getattr(got, "output", "").split()), getattr(got, "exit_code", 0)
    assert code == 2 and said in msg and "save" in msg and "\n" not in msg, (code, msg)
    assert {n: (sv / n).read_bytes() for n in files} == before and sorted(p.name for p in sv.iterdir()) == sorted(files)


@pytest.mark.parametrize("how", ["library", "cli"])
def test_a_checkpoint_set_is_replaced_and_resumed(one_step_run, tmp_path, app, how):
    """The rule's other side: the folder a run saved is replaced with --overwrite, resumed into
    without it, and resumed from."""
    data, good = one_step_run
    sv = tmp_path / "sv"
    _fill(sv, {"mp_rank_00.pt": "CK"}, good)
    if how == "library":
        train(TrainConfig(data_dir=data, shape=SHAPE, steps=1, quiet=True, save=str(sv), overwrite=True))
        res = train(TrainConfig(data_dir=data, steps=1, quiet=True, load=str(sv), save=str(sv)))
        assert res.final_step == 2
    else:
        r = CliRunner().invoke(app, ["train", data, "--device", "cpu", "--steps", "1", "--load", str(sv), "--save",
                                     str(sv)])
        assert r.exit_code == 0, r.output
    assert torch.load(sv / "mp_rank_00.pt", weights_only=True)["step"] == 2


@pytest.mark.parametrize("extra", [b"my thesis\n", "CK"])
def test_load_refuses_a_folder_of_two_runs(one_step_run, tmp_path, extra):
    data, good = one_step_run
    ck = tmp_path / "ck"
    _fill(ck, {"mp_rank_00.pt": "CK", "mp_rank_07.pt": extra}, good)
    with pytest.raises(PacktoolError, match="saved by a run of 1 tensor-parallel rank.*also holds mp_rank_07.pt"):
        train(TrainConfig(data_dir=data, steps=1, quiet=True, load=str(ck)))
