"""packtool: alignment-aware sequence packing for Megatron THD training."""
__version__ = "0.1.0"
