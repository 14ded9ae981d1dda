#!/usr/bin/env python3
"""Int8 products of Qwen3-8B at 16 to 128 rows (continuous-batching decode), chapter 13: bf16 cuBLAS against the
engine's int8 kernel with its tile table (`int8_matmul`), and against the same kernel over 15 tiles, each with the
batch in one block of rows (`BLOCK_M` the power of two from 16 that holds it; 64 and 128 above 64 rows) and 1, 2
or 4 K splits (1 for the wide gate/up product). Each product is timed as 36 layers of distinct weights replayed
from one CUDA graph, as a decode step runs them; each candidate is first checked against a float64 reference.

Run from the repository root:
  PYTHONPATH=.:benchmarks python3 benchmarks/int8_batch_gpu.py [--m=32,64] [--shorter] [--routes] [--smoke]
--shorter tries tiles of fewer rows than the batch instead (the batch in several blocks of rows); --routes sweeps no
tiles but times dequantise + cuBLAS beside the table (where `w8_linear` changes route); --smoke runs tiny
shapes on the CPU (Triton's interpreter), to check the script. Writes int8_batch_gpu.json to $OUT
if set, else to benchmarks/results/.
"""
import sys, itertools
import torch
import triton
import minillm.quant as Q
from helpers.graph_timing import graph_us                       # benchmarks/helpers/graph_timing.py
from helpers.int8_products import SHAPES                        # (N, K) of the four products
from helpers.bench_io import log, saver, run_section

SMOKE, SHORTER, ROUTES = '--smoke' in sys.argv, '--shorter' in sys.argv, '--routes' in sys.argv
DEV, LAYERS = ('cpu', 2) if SMOKE else ('cuda', 36)
if SMOKE: SHAPES = dict(qkv=(96, 64), gate_up=(9000, 32))
MS = next((list(map(int, a[4:].split(','))) for a in sys.argv[1:] if a.startswith('--m=')), [16, 32, 64, 128])
TILES = [(64, 128, 4, 4), (64, 256, 4, 3), (128, 128, 4, 3), (128, 128, 8, 3), (128, 64, 4, 5), (128, 64, 4, 6),
         (128, 64, 4, 8), (128, 32, 4, 8), (64, 64, 4, 6), (64, 64, 4, 8), (256, 64, 8, 4), (128, 64, 8, 5),
         (128, 128, 4, 4), (64, 128, 4, 6), (128, 64, 4, 4)]  # (BLOCK_N, BLOCK_K, warps, stages)
R = dict(argv=sys.argv, errors={}, products={})
save = saver(R, 'int8_batch_gpu')

def rel(a, b): return ((a.double() - b).norm() / b.norm()).item()

def sweep(x, ws, out, ref, M, N):
    "Every tile that computes the product correctly, with its µs per call."
    cands = {}
    bms = (64, 128) if M > 64 else (triton.next_power_of_2(max(16, M)),)     # the batch in one block of rows
    if SHORTER: bms = tuple(b for b in (16, 32, 64) if b < bms[0])          # or in several shorter ones
    tiles, splits = TILES[:2] if SMOKE else TILES, (1, 2, 4) if N <= 8192 else (1,)
    for bm, (bn, bk, nw, ns), split in itertools.product(bms, tiles, splits):
        cfg = Q.fit_config((bm, bn, bk, nw, ns), x.dtype, x.device) + (split,)
        if cfg in cands: continue
        f = lambda q, s, c=cfg: Q.int8_matmul(x, q, s, out=out, config=c)
        try:
            out.fill_(float('nan'))
            f(*ws[0])
            e = rel(out, ref)
            ok = e < 1e-2 and bool(out.isfinite().all())
            us = graph_us([lambda q=q, s=s: f(q, s) for q, s in ws]) if ok else None
            cands[cfg] = dict(err=e, us=us)
        except Exception as ex: cands[cfg] = dict(error=f"{type(ex).__name__}: {str(ex)[:300]}")
    return cands

def products():
    g = torch.Generator(DEV).manual_seed(0)
    def layer(n, k):
        q = torch.randint(-127, 128, (n, k), device=DEV, dtype=torch.int8, generator=g)
        return q, (torch.rand(n, device=DEV, generator=g) * 1e-3 + 1e-4).to(torch.bfloat16)
    W = {name: [layer(n, k) for _ in range(LAYERS)] for name, (n, k) in SHAPES.items()}
    for M in MS:
        R['products'][M] = res = {}
        for name, (N, K) in SHAPES.items():
            x = torch.randn(M, K, device=DEV, generator=g).to(torch.bfloat16)
            out = torch.empty(M, N, device=DEV, dtype=torch.bfloat16)
            ws = W[name]
            ref = x.double() @ (ws[0][0].double() * ws[0][1].double()[:, None]).T
            deq = Q.dequantize_weight if SMOKE else Q.dequantize_triton
            wb = [deq(q, s) for q, s in ws]                          # bf16 weights, for cuBLAS
            r = res[name] = dict(bf16=graph_us([lambda w=w: torch.mm(x, w.T, out=out) for w in wb]))
            del wb
            r['int8_now'] = graph_us([lambda q=q, s=s: Q.int8_matmul(x, q, s, out=out) for q, s in ws])   # the table
            r['int8_now_cfg'] = Q.pick_config(M, N, K, x.dtype, x.device)
            if ROUTES:
                r['dequant_cublas'] = graph_us([lambda q=q, s=s: torch.mm(x, deq(q, s).T, out=out) for q, s in ws])
                log(f"M={M:4} {name:8} bf16 {r['bf16']:8.1f}  int8 now {r['int8_now']:8.1f}  "
                    f"dequantise + cuBLAS {r['dequant_cublas']:8.1f}")
                save()
                continue
            cands = sweep(x, ws, out, ref, M, N)
            r['candidates'] = {str(c): v for c, v in cands.items()}
            ok = {c: v['us'] for c, v in cands.items() if v.get('us')}
            if not ok:
                R['errors'][f'M={M} {name}'] = f"no candidate ran: {next(iter(cands.values()), 'no tile to try')}"
                log(f"M={M} {name}:", R['errors'][f'M={M} {name}'])
                continue
            best = min(ok, key=ok.get)
            r.update(best=best, best_us=ok[best], gbs_best=N * K / ok[best] / 1e3)
            log(f"M={M:3} {name:8} bf16 {r['bf16']:7.1f}  int8 now {r['int8_now']:7.1f} {r['int8_now_cfg']}  "
                f"best tile {ok[best]:7.1f} {best}  ({r['bf16'] / ok[best]:.2f}x bf16)")
            save()

run_section(products, R, save)
log('done')
