#!/usr/bin/env python3
"""Compile the one-launch decode attention (chapter 10c) for the GPUs the book runs on, without a GPU: T4 (sm_75),
L4 (sm_89) and H100/H200 (sm_90), with Triton's own compiler and ptxas, at Qwen3-0.6B's shapes in bf16.
Run from the repository root:  python tools/compile_targets.py"""
import os
os.environ['TRITON_INTERPRET'] = '0'                   # compile the kernels, do not interpret them
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from minillm.kernels.decode import _rope_decode_kernel as kernel

ptrs = dict(x_ptr='bf16', qw_ptr='bf16', kw_ptr='bf16', cos_ptr='fp32', sin_ptr='fp32', k_ptr='bf16', v_ptr='bf16',
            bt_ptr='i32', ctx_ptr='i32', slot_ptr='i64', out_ptr='bf16', po_ptr='fp32', plse_ptr='fp32', lock_ptr='i32')
const = dict(HQ=16, HKV=8, G=2, BLOCK_H=16, D=128, BS=16, BLOCK_N=64, SPLITS=16, NORM=True, PREC='tf32', PDL=False)
sig = {n: '*' + t for n, t in ptrs.items()} | {n: 'fp32' for n in ('qk_scale', 'eps')}
sig |= {n: 'i32' for n in kernel.arg_names if n not in sig and n not in const} | {n: 'constexpr' for n in const}
for name, cap in (('T4', 75), ('L4', 89), ('H200', 90)):
    src = ASTSource(fn=kernel, signature=sig, constexprs={(kernel.arg_names.index(n),): v for n, v in const.items()})
    c = triton.compile(src, target=GPUTarget('cuda', cap, 32), options=dict(num_warps=4, num_stages=2))
    print(f"{name} (sm_{cap}): compiled, {len(c.asm['cubin']):,} bytes of cubin")
