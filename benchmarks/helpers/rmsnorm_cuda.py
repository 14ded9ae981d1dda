#!/usr/bin/env python3
"""The CUDA RMSNorm kernel of chapter 14 (csrc/rmsnorm.cu), built for the benchmarks that time it.

The engine normalises with the Triton kernel of chapter 10a; this kernel is the chapter's study, not a module of
the package. `load()` compiles it with nvcc on first use (about a minute, then from PyTorch's extension cache) and
raises if that fails: nothing falls back to PyTorch here, so a timing is always of the kernel.
Run as a script, it builds (or loads) the kernel and prints how long that took:  python benchmarks/helpers/rmsnorm_cuda.py
"""
import time
from pathlib import Path
from torch.utils.cpp_extension import load as load_extension

SOURCE = Path(__file__).resolve().parents[2]/'csrc'/'rmsnorm.cu'
ext = None   # the compiled extension once loaded (a benchmark may stand a counting wrapper in for it)

def load():
    "The compiled extension, built on the first call; a RuntimeError saying why if it cannot be built."
    global ext
    if ext is None:
        try: ext = load_extension(name='minillm_rmsnorm', sources=[str(SOURCE)], extra_cuda_cflags=['-O3'])
        except Exception as e:
            raise RuntimeError(f"the CUDA RMSNorm kernel ({SOURCE}) did not build: {type(e).__name__}: {e}") from e
    return ext

def rms_norm(x, weight, eps: float = 1e-6, residual=None):
    "RMSNorm of the last dimension by the kernel, or `(norm(x + residual), x + residual)`: `RMSNorm.kernel`'s signature."
    x, weight = x.contiguous(), weight.contiguous()
    if residual is None: return load().rms_norm(x, weight, float(eps))
    return tuple(load().fused_add_rms_norm(x, residual.contiguous(), weight, float(eps)))

if __name__ == '__main__':
    t0 = time.time()
    load()
    print('rmsnorm build ok', round(time.time() - t0, 1), 's')
