"""Fault injection for the Ray engine's tests, kept out of the product (a hook there would be
reachable by a user's shell or job spec). `killed_once(monkeypatch, marks)` stands in for
`ray_write.write_group` on the driver: the first attempt of every shard write leaves a marker
in `marks` and ends its worker process (os._exit), what a lost node looks like to Ray; the
retry writes the shard. A `marks` folder that does not exist makes every attempt fail."""
from __future__ import annotations

import os
import sys

import ray.cloudpickle

import packtool.engines.ray_write as ray_write

# the workers cannot import this test module: the stand-in travels by value
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _first_attempt_dies(write, marks: str):
    def write_group(group, *a, **k):
        marker = os.path.join(marks, f"shard-{int(group.column('shard')[0].as_py()):05d}.killed")
        if not os.path.exists(marker):
            with open(marker, "x"):
                pass
            os._exit(1)
        return write(group, *a, **k)
    return write_group


def killed_once(monkeypatch, marks) -> None:
    monkeypatch.setattr(ray_write, "write_group", _first_attempt_dies(ray_write.write_group, str(marks)))
