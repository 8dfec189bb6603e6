"""Stage 3, slabs: a plan plus the token store in, Parquet shards and a manifest out.

`format` is the one owner of the format: the manifest (write, read, validate, defaults), with
its parts `schema` (the shards' Parquet schema), `names` (the names of an output's files) and
`provenance` (the manifest's record of where the slabs came from);
`writer` writes shards from an in-memory plan, `routed` from a plan spilled to disk, both cut
into shards and row groups by `shard_sizes`,
`gather` preads token spans from the flat store; `reader` reads slabs back with bounded
memory (the Megatron dataset and users' own loaders).
"""
from packtool.slabs.format import FORMAT_NAME, FormatError, ShardInfo, SlabManifest, read_manifest
from packtool.slabs.names import LEGACY_MANIFEST, MANIFEST, manifest_file
from packtool.slabs.reader import SlabIndex, SlabReader, SlabRow
from packtool.slabs.schema import SCHEMA, SCHEMA_VERSION

__all__ = ["FORMAT_NAME", "LEGACY_MANIFEST", "MANIFEST", "SCHEMA", "SCHEMA_VERSION", "FormatError",
           "ShardInfo", "SlabManifest", "manifest_file", "read_manifest", "SlabIndex", "SlabReader", "SlabRow"]
