"""python -P launch.py TREE VARIANT pack ARGS...: packtool's CLI from TREE with VARIANT's knobs set first
(a, b: as is; if3: _IN_FLIGHT=3; trim8: glibc trim threshold 8 MiB; both: if3 + trim8; nohb: no HeapBound trims)."""
import os, runpy, sys
tree, variant = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.abspath(tree))
sys.argv = ["packtool"] + sys.argv[3:]
import packtool  # noqa: F401  first, as `python -m packtool` does
assert packtool.__file__.startswith(os.path.abspath(tree)), packtool.__file__
if variant in ("if3", "both"):
    import packtool.tokenize.pipeline as p
    p._IN_FLIGHT = 3
if variant in ("trim8", "both"):
    import packtool.heap as h
    h.TRIM_THRESHOLD = 8 << 20
if variant == "nohb":
    import packtool.heap as h
    h.HeapBound.check = lambda self: None
runpy.run_module("packtool", run_name="__main__", alter_sys=True)
