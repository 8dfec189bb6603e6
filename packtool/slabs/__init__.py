"""Stage 3, slabs: a plan plus the token store in, Parquet shards and a manifest out.

`format` is the one owner of the schema and the manifest (write, read, validate, defaults);
`writer` writes shards from an in-memory plan, `routed` from a plan spilled to disk,
`gather` preads token spans from the flat store; `reader` reads slabs back with bounded
memory (the Megatron dataset and users' own loaders).
"""
from packtool.slabs.format import (
                                   FORMAT_NAME,
                                   LEGACY_MANIFEST,
                                   MANIFEST,
                                   SCHEMA,
                                   SCHEMA_VERSION,
                                   FormatError,
                                   ShardInfo,
                                   SlabManifest,
                                   manifest_file,
                                   read_manifest,
)
from packtool.slabs.reader import SlabIndex, SlabReader, SlabRow

__all__ = ["FORMAT_NAME", "LEGACY_MANIFEST", "MANIFEST", "SCHEMA", "SCHEMA_VERSION", "FormatError",
           "ShardInfo", "SlabManifest", "manifest_file", "read_manifest", "SlabIndex", "SlabReader", "SlabRow"]
