"""S40-3: a manifest that lists a side column of width 0 (K=0), a negative width or one that is
not an integer is refused in one line by every reader of side columns: the library reader
(SlabManifest / SlabReader), packtool.hf, the Megatron dataset, inspect, verify and FORMAT.md's
standalone reader. `pack` refuses K=0 (S39-2); the standalone reader took width 0 (its check was
"a count", >= 0), and every reader must refuse what pack never writes."""
from __future__ import annotations

import json
import os
import re
import shutil

import pytest
from side_support import side_output  # noqa: F401  (the fixture)
from slab_support import format_reader
from typer.testing import CliRunner

from packtool.errors import PacktoolError

WIDTHS = {"0": 0, "-1": -1, "2.5": 2.5, "5.0": 5.0, "'5' (a string)": "5", "true": True, "null": None}


def _standalone(out):
    mod = format_reader()
    man = mod.open_output(out)
    first = man["shards"][0]["file"]
    return mod.read_slab_for_cp_rank(out, first, 0, 0, man)


def _library(out):
    from packtool.slabs.format import SlabManifest
    from packtool.slabs.reader import SlabIndex, SlabReader
    m = SlabManifest.read(out)
    return SlabReader(m, SlabIndex.build(m)).row(0)


def _hf(out):
    pytest.importorskip("torch")
    from packtool.hf import SlabDataset
    return SlabDataset(out)[0]


def _megatron(out):
    pytest.importorskip("megatron.core")
    from packtool.megatron.dataset import PackedSlabDataset
    return next(iter(PackedSlabDataset(out, grad_accum=1, micro_batch_tokens=1024).steps(max_steps=1)))


def _cli(*argv):
    def run(out):
        from packtool.cli.app import app
        return CliRunner().invoke(app, [*argv[:1], out, *argv[1:]])
    return run


# each reader: (how it reads, the exit code a command gives; None: a library raising)
CONSUMERS = {"library reader": (_library, None), "packtool.hf": (_hf, None), "megatron dataset": (_megatron, None),
             "inspect": (_cli("inspect", "--no-what-if"), 2), "verify": (_cli("verify"), 1),
             "standalone reader": (_standalone, None)}


@pytest.fixture(scope="module")
def outputs(side_output, tmp_path_factory):
    """A copy of the side-column output per width, the support column `sup` (K=5) given it."""
    root = tmp_path_factory.mktemp("k")
    made = {}
    for name, width in WIDTHS.items():
        d = str(root / re.sub(r"[^a-z0-9.-]+", "_", name))
        shutil.copytree(side_output, d)
        path = os.path.join(d, ".manifest.json")
        m = json.load(open(path))
        col = next(c for c in m["side_columns"] if c["name"] == "sup")
        col["width"] = width
        json.dump(m, open(path, "w"))
        made[name] = d
    return made


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("consumer", CONSUMERS)
def test_a_side_column_width_pack_never_writes_is_refused(outputs, consumer, width):
    out = outputs[width]
    read, code = CONSUMERS[consumer]
    if code is not None:
        r = read(out)
        text = r.stdout + r.stderr
        said = r.stdout if consumer == "verify" else r.stderr  # verify's report: a line per failed check
        lines = [ln for ln in said.splitlines() if ln.startswith(("error:", "✗"))]
        assert r.exit_code == code and "Traceback" not in text and len(lines) == 1, text
        line = lines[0]
    elif consumer == "standalone reader":  # an example with no error type of its own
        with pytest.raises(ValueError) as e:
            read(out)
        line = str(e.value)
    else:
        with pytest.raises(PacktoolError) as e:
            read(out)
        line = str(e.value)
    assert "\n" not in line and re.search(r"(\bsup\b|side_columns\[1\])\.?.*width is " +
                                           re.escape(json.dumps(WIDTHS[width])), line), line
