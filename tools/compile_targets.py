#!/usr/bin/env python3
"""Compile kernels for the GPUs the book runs on, without a GPU, with Triton's own compiler and ptxas.
`decode` (the default): the one-launch decode attention (chapter 10c) for a T4 (sm_75), an L4 (sm_89) and an
H100/H200 (sm_90), at Qwen3-0.6B's shapes in bf16. `int8`: every tile of the int8 kernel's table (chapter 13) for a
T4, an A100 (sm_80) and an L4, after `_fit` lowers it to the GPU's shared memory per block, in the dtype the engine
picks there (fp16 on a T4, bf16 elsewhere); the compiled kernel's shared memory must fit too.
Run from the repository root:  python tools/compile_targets.py [decode|int8]"""
import os, sys
os.environ['TRITON_INTERPRET'] = '0'                   # compile the kernels, do not interpret them
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

def compile_for(kernel, ptrs: dict, const: dict, cap: int, floats=(), **options):
    "Compile `kernel` for sm_`cap`: pointers typed by `ptrs`, `floats` fp32, `const` constexprs, the rest i32."
    sig = {n: '*' + t for n, t in ptrs.items()} | {n: 'fp32' for n in floats}
    sig |= {n: 'i32' for n in kernel.arg_names if n not in sig and n not in const} | {n: 'constexpr' for n in const}
    consts = {(kernel.arg_names.index(n),): v for n, v in const.items()}
    src = ASTSource(fn=kernel, signature=sig, constexprs=consts)
    return triton.compile(src, target=GPUTarget('cuda', cap, 32), options=options)

def decode():
    from minillm.kernels.decode import _rope_decode_kernel as kernel
    ptrs = dict(x_ptr='bf16', qw_ptr='bf16', kw_ptr='bf16', cos_ptr='fp32', sin_ptr='fp32', k_ptr='bf16',
                v_ptr='bf16', bt_ptr='i32', ctx_ptr='i32', slot_ptr='i64', out_ptr='bf16', po_ptr='fp32',
                plse_ptr='fp32', lock_ptr='i32')
    const = dict(HQ=16, HKV=8, G=2, BLOCK_H=16, D=128, BS=16, BLOCK_N=64, SPLITS=16, NORM=True, PREC='tf32',
                 PDL=False)
    for name, cap in (('T4', 75), ('L4', 89), ('H200', 90)):
        c = compile_for(kernel, ptrs, const, cap, floats=('qk_scale', 'eps'), num_warps=4, num_stages=2)
        print(f"{name} (sm_{cap}): compiled, {len(c.asm['cubin']):,} bytes of cubin")

def int8():
    from minillm.quant import _int8_matmul_kernel as kernel, _CONFIGS, _fit
    tiles = sorted({cfg for row in _CONFIGS for cfg in row[1:] if cfg[0] > 1})       # not the GEMV's
    # shared memory a block may opt in to (bytes), and the engine's dtype there
    for name, cap, smem, dt in (('T4', 75, 64 << 10, 'fp16'), ('A100', 80, 163 << 10, 'bf16'),
                                ('L4', 89, 99 << 10, 'bf16')):
        ptrs = dict(x_ptr=dt, w_ptr='i8', s_ptr=dt, b_ptr=dt, o_ptr=dt, p_ptr='fp32')
        for cfg in tiles:
            bm, bn, bk, nw, ns, *split = _fit(cfg, 2, smem)
            const = dict(HAS_BIAS=False, UPCAST=False, FP16_MAGIC=dt == 'fp16', EVEN_K=True,
                         SPLIT_K=(split or [1])[0], BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk)
            c = compile_for(kernel, ptrs, const, cap, num_warps=nw, num_stages=ns)
            fits = 'fits' if c.metadata.shared <= smem else 'DOES NOT FIT'
            print(f"{name} (sm_{cap}, {dt}) {str(cfg):24} as {str((bm, bn, bk, nw, ns, *split)):24} "
                  f"{c.metadata.shared:6,} of {smem:7,} bytes of shared memory: {fits}")

{'decode': decode, 'int8': int8}[(sys.argv[1:] or ['decode'])[0]]()
