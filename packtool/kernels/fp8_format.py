"""The FP8 formats' constants, shared by the quantizers of packtool/kernels/fp8.py (torch reference) and
packtool/kernels/fp8_quant.py (Triton), so that neither imports the other for them: fp8.py calls into
fp8_quant.py, and fp8_quant.py reads only this module."""

import torch

E4M3 = torch.float8_e4m3fn
E5M2 = torch.float8_e5m2
FMAX = {E4M3: 448.0, E5M2: 57344.0}
# block scales are amax * (1/FMAX), not amax / FMAX: CUDA's eager division by a Python scalar
# multiplies by its reciprocal and the CPU's divides, so the quotient differed by an ulp
# between them; the product is the same everywhere (and in packtool/kernels/fp8_quant.py)
INV_FMAX = {k: 1.0 / v for k, v in FMAX.items()}
BLOCK = 128
