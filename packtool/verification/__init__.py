"""Stage 4a, verify: a packed output (and optionally its source) in, a list of problems out.

`run` reads the manifest through `slabs.format` and fans shards out to a process pool;
`shard` opens one shard (`job`: what a worker is asked and hands back) and streams its record batches to `batch` (nulls, lists, cu arrays,
segments), which asks `slab_layout` (each slab against `layout.compute_layout`, CP), `tokens`
(the per-token rules, and the tokens against the source store) and `side`, and adds up in
`tally`; `manifest_checks` the manifest's entries and stats against what the shards gave, `declared` the
manifest fields that repeat a policy, `cover` the whole-output counts and coverage, `source` what --source reads and
the manifest's provenance record held to it, `problems` collects findings.
"""
from packtool.verification.run import VerifyReport, verify
from packtool.verification.source import source_store, source_tokenize_config

__all__ = ["verify", "VerifyReport", "source_store", "source_tokenize_config"]
