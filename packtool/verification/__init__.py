"""Stage 4a, verify: a packed output (and optionally its source) in, a list of problems out.

`run` reads the manifest through `slabs.format` and fans shards out to a process pool;
`shard` checks one shard against `layout.compute_layout`, `tokens` the tokens against the
source store, `cover` the whole-output counts and coverage, `source` what --source reads and
the manifest's provenance record held to it, `problems` collects findings.
"""
from packtool.verification.run import VerifyReport, verify
from packtool.verification.source import source_store, source_tokenize_config

__all__ = ["verify", "VerifyReport", "source_store", "source_tokenize_config"]
