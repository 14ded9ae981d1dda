#!/usr/bin/env python3
"""What limits the one-row int8 GEMV of a Qwen3-8B decode step: the read floor of its weights, and the GEMV with
parts of its work taken out or done another way.

Every timing is 36 layers of the four batch-1 products (qkv, o, gate_up, down: 193 MB of int8 a layer, distinct
weights) replayed from one CUDA graph, in µs per layer:
  read x4     a kernel that only reads the weights (xor of int32 words): the engine's grid, PDL and two chunks
              before the wait, one launch per product
  read x1     the same bytes read by one launch a layer
  engine      the library's int8 GEMV (minillm.quant.int8_matmul)
  variant     the engine's loop (same tile, grid, PDL, chunks before the wait) with MODE:
              0 its arithmetic (magic-number conversion, an fp32 FMA with the activation chunk)
              1 the conversion alone, summed (no activation)
              2 byte permutes (one `prmt` a weight after one `xor` a word) make q + 128 the fp32 denormal
                (q + 128) * 2^-149, summed (no activation)
              3 the engine's conversion and FMA, one activation value a chunk (no activation vector)
              4 as 2, with an FMA by one activation value a chunk
              5 byte permutes make 2^23 + q + 128, minus the magic number, FMA with the activation chunk
              6 as 2, FMA with the activation chunk times 2^64; the sum of the activations (to take off 128 of each)
                from a second load of the chunk
              vec 8 caps the weight loads at 8 bytes, so that the activation chunk needs no layout change;
              warps and block_n change the tile (the engine's: 4 rows of 512, 2 warps)
  persist     a fixed grid (programs per SM), each program looping over row tiles
MODEs 0, 5 and 6 and the persistent GEMV compute the product and are first checked against a float64 reference;
the others are timing probes whose outputs mean nothing.

Run from the repository root:  PYTHONPATH=.:benchmarks python3 benchmarks/int8_gemv_limits_gpu.py  [--smoke: small shapes, CPU]
(MODEs 2, 4, 5 and 6 use inline PTX and need a GPU.) Writes int8_gemv_limits_gpu.json to $OUT if set, else to
benchmarks/results/.
"""
import sys, os
SMOKE = '--smoke' in sys.argv
if SMOKE: os.environ.setdefault('TRITON_INTERPRET', '1')
import torch
import triton
import triton.language as tl
import minillm.quant as Q
from minillm.kernels.attention import pdl_options, gdc_launch_dependents, gdc_wait
from helpers.graph_timing import graph_us
from helpers.bench_io import log, saver, run_section
from helpers.int8_products import SHAPES as SHAPES_8B, int8_layers

R = dict(argv=sys.argv, errors={}, check={}, chain={})
save = saver(R, 'int8_gemv_limits_gpu')
dev = 'cpu' if SMOKE else 'cuda'
SHAPES = dict(qkv=(48, 1024), o=(32, 1024), gate_up=(96, 1024), down=(32, 3072)) if SMOKE else SHAPES_8B
LAYERS = 2 if SMOKE else 36
SMS = 4 if SMOKE else torch.cuda.get_device_properties(0).multi_processor_count

@triton.jit
def _read_kernel(w_ptr, o_ptr, K4: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K4: tl.constexpr, PDL: tl.constexpr):
    "Read rows of int32 words `[N, K4]` (BLOCK_N rows a program, two chunks before the PDL wait); store their xor."
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K4)
    p = w_ptr + rn[:, None].to(tl.int64) * K4 + rk[None, :]
    if PDL: gdc_launch_dependents()
    a0 = tl.load(p, eviction_policy='evict_first')
    a1 = tl.load(p + BLOCK_K4, eviction_policy='evict_first')
    if PDL: gdc_wait()
    acc = a0 ^ a1
    for k0 in tl.static_range(2 * BLOCK_K4, K4, BLOCK_K4): acc ^= tl.load(p + k0, eviction_policy='evict_first')
    tl.store(o_ptr + rn, tl.xor_sum(acc, 1))

def read(w, out):
    "`_read_kernel` on an int8 weight `[N, K]` as int32 words, with the engine's tile (4 rows of 512 bytes, 2 warps)."
    w4 = w.view(torch.int32)
    _read_kernel[(w4.shape[0] // 4,)](w4, out, K4=w4.shape[1], BLOCK_N=4, BLOCK_K4=128, num_warps=2, **pdl_options(w4))

@triton.jit
def _denormals(w):
    "int8 weights q -> the fp32 denormals (q + 128) * 2^-149: per word of four, one xor and four byte permutes."
    return tl.inline_asm_elementwise(
        "{ .reg .b32 t; xor.b32 t, $4, 0x80808080; prmt.b32 $0, t, 0, 0x4440; prmt.b32 $1, t, 0, 0x4441; "
        "prmt.b32 $2, t, 0, 0x4442; prmt.b32 $3, t, 0, 0x4443; }", "=r,=r,=r,=r,r", [w], dtype=tl.float32, is_pure=True, pack=4)

@triton.jit
def _magic(w):
    "int8 weights q -> 2^23 + q + 128 in fp32: one xor a word, one byte permute (with the exponent byte 0x4B) a weight."
    return tl.inline_asm_elementwise(
        "{ .reg .b32 t; xor.b32 t, $4, 0x80808080; prmt.b32 $0, t, 0x4B00, 0x5440; prmt.b32 $1, t, 0x4B00, 0x5441; "
        "prmt.b32 $2, t, 0x4B00, 0x5442; prmt.b32 $3, t, 0x4B00, 0x5443; }", "=r,=r,=r,=r,r", [w], dtype=tl.float32, is_pure=True, pack=4)

@triton.jit
def _variant_kernel(x_ptr, w_ptr, s_ptr, o_ptr, stride_wn, K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                    VEC: tl.constexpr, MODE: tl.constexpr, PDL: tl.constexpr):
    "The engine's one-row int8 GEMV loop (rows and K a whole number of tiles) with the arithmetic of MODE (see the top)."
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    p = w_ptr + rn[:, None].to(tl.int64) * stride_wn + tl.max_contiguous(rk, VEC)[None, :]
    if PDL: gdc_launch_dependents()
    w0 = tl.load(p, eviction_policy='evict_first')
    w1 = tl.load(p + BLOCK_K, eviction_policy='evict_first')
    if PDL: gdc_wait()
    acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    sx = tl.zeros((BLOCK_K,), dtype=tl.float32)
    for k0 in tl.static_range(0, K, BLOCK_K):
        if k0 == 0: w = w0
        elif k0 == BLOCK_K: w = w1
        else: w = tl.load(p + k0, eviction_policy='evict_first')
        if MODE == 0 or MODE == 1 or MODE == 3: wf = (w.to(tl.int32) + 0x4B000080).to(tl.float32, bitcast=True) - 8388736.0
        if MODE == 0: acc += wf * tl.load(x_ptr + k0 + rk).to(tl.float32)[None, :]
        elif MODE == 1: acc += wf
        elif MODE == 2: acc += _denormals(w)
        elif MODE == 3: acc += wf * tl.load(x_ptr + k0).to(tl.float32)
        elif MODE == 4: acc += _denormals(w) * (tl.load(x_ptr + k0).to(tl.float32) * 18446744073709551616.0)
        elif MODE == 5: acc += (_magic(w) - 8388736.0) * tl.load(x_ptr + k0 + rk).to(tl.float32)[None, :]
        else:
            acc += _denormals(w) * (tl.load(x_ptr + k0 + rk).to(tl.float32) * 18446744073709551616.0)[None, :]   # * 2^64
            sx += tl.load(x_ptr + k0 + rk, eviction_policy='evict_last').to(tl.float32)
    if MODE == 6: y = tl.sum(acc, 1) * 3.8685626227668134e25 - 128.0 * tl.sum(sx, 0)     # 2^85 = 2^149 / 2^64
    else: y = tl.sum(acc, 1)
    y = y * tl.load(s_ptr + rn).to(tl.float32)
    tl.store(o_ptr + rn, y.to(o_ptr.dtype.element_ty))

def variant(x, w, s, out, mode=0, vec=16, block_n=4, block_k=512, warps=2):
    N, K = w.shape
    _variant_kernel[(N // block_n,)](x, w, s, out, w.stride(0), K=K, BLOCK_N=block_n, BLOCK_K=block_k, VEC=vec, MODE=mode,
                                     num_warps=warps, **pdl_options(x))

@triton.jit
def _persist_kernel(x_ptr, w_ptr, s_ptr, o_ptr, N, K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PDL: tl.constexpr):
    "One-row int8 GEMV by a fixed grid: program p does row tiles p, p + G, ...; the next tile's first two chunks load before this one's sum."
    pid, G = tl.program_id(0), tl.num_programs(0)
    rb, rk = tl.arange(0, BLOCK_N), tl.arange(0, BLOCK_K)
    rn = pid * BLOCK_N + rb
    p = w_ptr + rn[:, None].to(tl.int64) * K + rk[None, :]
    if PDL: gdc_launch_dependents()
    w0 = tl.load(p, mask=(rn < N)[:, None], other=0, eviction_policy='evict_first')
    w1 = tl.load(p + BLOCK_K, mask=(rn < N)[:, None], other=0, eviction_policy='evict_first')
    if PDL: gdc_wait()
    for t in range(pid, tl.cdiv(N, BLOCK_N), G):
        rn = t * BLOCK_N + rb
        p = w_ptr + rn[:, None].to(tl.int64) * K + rk[None, :]
        acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
        for k0 in tl.static_range(0, K, BLOCK_K):
            if k0 == 0: w = w0
            elif k0 == BLOCK_K: w = w1
            else: w = tl.load(p + k0, mask=(rn < N)[:, None], other=0, eviction_policy='evict_first')
            acc += ((w.to(tl.int32) + 0x4B000080).to(tl.float32, bitcast=True) - 8388736.0) * tl.load(x_ptr + k0 + rk).to(tl.float32)[None, :]
        okn = (rn + G * BLOCK_N < N)[:, None]                      # the next tile of this program
        w0 = tl.load(p + G * BLOCK_N * K, mask=okn, other=0, eviction_policy='evict_first')
        w1 = tl.load(p + G * BLOCK_N * K + BLOCK_K, mask=okn, other=0, eviction_policy='evict_first')
        y = tl.sum(acc, 1) * tl.load(s_ptr + rn, mask=rn < N, other=0.).to(tl.float32)
        tl.store(o_ptr + rn, y.to(o_ptr.dtype.element_ty), mask=rn < N)

def persist(x, w, s, out, per_sm=16, block_n=4, block_k=512, warps=2):
    N, K = w.shape
    grid = min(triton.cdiv(N, block_n), SMS * per_sm)
    _persist_kernel[(grid,)](x, w, s, out, N, K=K, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=warps, **pdl_options(x))

GPU_ONLY = (2, 4, 5, 6)                  # modes with inline PTX
VARIANTS = [dict(mode=m) for m in range(7)] + [dict(mode=m, vec=8) for m in (0, 5, 6)]
VARIANTS += [dict(mode=m, warps=1) for m in (0, 5, 6)] + [dict(mode=m, block_n=8, warps=2) for m in (5, 6)] + [dict(mode=m, block_n=8, warps=1) for m in (5, 6)]
PERSIST = [dict(per_sm=p) for p in (4, 8, 16)] + [dict(per_sm=8, block_n=8, warps=4)]
if SMOKE: VARIANTS = [v for v in VARIANTS if v['mode'] not in GPU_ONLY]

def check():
    "The variants that compute the product, and the engine, against float64 at the four shapes."
    W, X, O = int8_layers(LAYERS, SHAPES, dev)
    runs = [(f"variant {v}", lambda x, w, s, o, v=v: variant(x, w, s, o, **v)) for v in VARIANTS if v['mode'] in (0, 5, 6)]
    runs += [(f"persist {v}", lambda x, w, s, o, v=v: persist(x, w, s, o, **v)) for v in PERSIST]
    runs += [('engine', lambda x, w, s, o: o.copy_(Q.int8_matmul(x, w, s)))]
    for label, fn in runs:
        for k in SHAPES:
            (w, s), x = W[0][k], X[k]
            exact = (x.double() @ w.double().T) * s.double()
            fn(x, w, s, O[k])
            err = ((O[k].double() - exact).abs().max() / exact.abs().max()).item()
            R['check'][f"{label} {k}"] = err
            log(f"check {label} {k:8}: max error / max |y| {err:.1e}")
            assert err < 1e-2, (label, k, err)

def chain():
    "µs per layer of each variant: 36 layers of the four products in one graph."
    W, X, O = int8_layers(LAYERS, SHAPES, dev)
    nbytes = sum(n * kk for n, kk in SHAPES.values())
    res = R['chain']
    res['bytes_per_layer'] = nbytes
    sink = torch.empty(max(n for n, _ in SHAPES.values()), device=dev, dtype=torch.int32)
    big = [torch.randint(-127, 128, (nbytes // 4096, 4096), device=dev, dtype=torch.int8) for _ in range(LAYERS)]
    sink1 = torch.empty(big[0].shape[0], device=dev, dtype=torch.int32)
    runs = [('read x4', [lambda w=w, k=k: read(w[k][0], sink) for w in W for k in SHAPES]),
            ('read x1', [lambda b=b: read(b, sink1) for b in big]),
            ('engine', [lambda w=w, k=k: Q.int8_matmul(X[k], *w[k]) for w in W for k in SHAPES])]
    runs += [(f"variant {v}", [lambda w=w, k=k, v=v: variant(X[k], *w[k], O[k], **v) for w in W for k in SHAPES]) for v in VARIANTS]
    runs += [(f"persist {v}", [lambda w=w, k=k, v=v: persist(X[k], *w[k], O[k], **v) for w in W for k in SHAPES]) for v in PERSIST]
    for label, calls in runs:
        try:
            res[label] = graph_us(calls) * len(calls) / LAYERS
            log(f"chain {label:40} {res[label]:6.1f} µs/layer ({nbytes / res[label] / 1e6:.2f} TB/s)")
        except Exception as e:
            R['errors'][label] = repr(e)
            log('FAILED', label, repr(e))
        save()

if __name__ == '__main__':
    run_section(check, R, save)
    run_section(chain, R, save)
    print('\n| kernel | µs per layer | TB/s |\n|---|---|---|')
    for k, v in R['chain'].items():
        if k != 'bytes_per_layer': print(f"| {k} | {v:.1f} | {R['chain']['bytes_per_layer'] / v / 1e6:.2f} |")
    log('done; errors in:', list(R['errors']) or 'none')
