#!/usr/bin/env python3
"""The decode attention kernel (`paged_decode`, chapter 10) at the shapes of the throughput workloads, where it
takes most of the GPU's time: Qwen3-0.6B's heads (16 query and 8 KV heads of 128, bf16, blocks of 16 placed at
random), many sequences of short or mixed contexts. Every tile configuration (keys a tile, warps, pipeline depth)
and split count is first checked against the PyTorch reference attention on the same caches, then timed as `LAYERS`
launches over distinct caches replayed from one CUDA graph; the rate is the K/V bytes read over the time.

Run from the repository root:  PYTHONPATH=.:benchmarks python3 benchmarks/decode_batch_gpu.py [--smoke]
--smoke runs tiny shapes on the CPU (Triton's interpreter), to check the script. Writes decode_batch_gpu.json to
$OUT if set, else to benchmarks/results/.
"""
import sys, itertools
import torch
import minillm.kernels.attention as A
from helpers.paged_steps import paged_step, reference                   # benchmarks/helpers/paged_steps.py
from helpers.graph_timing import graph_us                       # benchmarks/helpers/graph_timing.py
from helpers.bench_io import log, saver, run_section

SMOKE = '--smoke' in sys.argv
DEV, LAYERS = ('cpu', 1) if SMOKE else ('cuda', 8)
HQ, HKV, D, BS, DT = (4, 2, 32, 16, torch.float16) if SMOKE else (16, 8, 128, 16, torch.bfloat16)
g, gd = torch.Generator().manual_seed(0), torch.Generator(DEV).manual_seed(0)    # lengths; caches
U = lambda n, lo, hi: torch.randint(lo, hi + 1, (n,), generator=g).tolist()
# the 256 x 256 -> 128 batch mid-decode; nano-vllm's workload full, at its tail, and at its last few
SHAPES = ({'4 x 40': [40] * 4} if SMOKE else
          {'256 x 320': [320] * 256, '256 x U(200, 2000)': U(256, 200, 2000),
           '64 x U(600, 2000)': U(64, 600, 2000), '16 x U(1000, 2000)': U(16, 1000, 2000)})
CONFIGS = ([(32, 4, 1)] if SMOKE else                                     # (BLOCK_N, num_warps, num_stages)
           [(bn, nw, ns) for bn, nw, ns in itertools.product((32, 64, 128), (4, 8), (2, 3, 4))])
R = dict(argv=sys.argv, errors={}, shapes={})
save = saver(R, 'decode_batch_gpu')

def caches(ctx):
    "A step over `ctx` (`paged_step`): the query, `LAYERS` (k, v) caches on one block table, the table, the lengths."
    q, kc, vc, bt, lens = paged_step(ctx, HQ, HKV, D, BS, DT, DEV, gd)
    rand = lambda: torch.randn(kc.shape, dtype=DT, device=DEV, generator=gd)
    return q, [(kc, vc)] + [(rand(), rand()) for _ in range(LAYERS - 1)], bt, lens

def shape(name, ctx):
    q, kv, bt, lens = caches(ctx)
    S = len(ctx)
    out = torch.empty_like(q)
    auto = A.decode_splits(S, HKV, DEV, sum(ctx) // S)
    ref = reference(q, *kv[0], bt, lens).float()
    nbytes = 2 * sum(ctx) * HKV * D * DT.itemsize
    rows = R['shapes'][name] = dict(S=S, mean_ctx=sum(ctx) / S, auto_splits=auto, default=A.decode_config(q),
                                     MB=nbytes / 1e6, runs={})
    splits = sorted({1, auto, 2 * auto} if auto > 1 else {1, 2})
    for (bn, nw, ns), sp in itertools.product(CONFIGS, splits):
        f = lambda k, v: A.paged_decode(q, k, v, bt, lens, out=out, num_splits=sp,
                                         config=dict(block_n=bn, num_warps=nw, num_stages=ns))
        try:
            f(*kv[0])
            err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
            us = graph_us([lambda k=k, v=v: f(k, v) for k, v in kv]) if err < 2e-2 else None
            r = dict(err=err, us=us, TBps=us and nbytes / us / 1e6)
        except Exception as ex: r = dict(error=f"{type(ex).__name__}: {str(ex)[:300]}")
        rows['runs'][f'{bn} {nw} {ns} splits {sp}'] = r
    ok = {k: v['us'] for k, v in rows['runs'].items() if v.get('us')}
    d = rows['default']
    now = rows['runs'].get(f"{d['block_n']} {d['num_warps']} {d['num_stages']} splits {auto}", {})
    best = min(ok, key=ok.get) if ok else None
    rows.update(now_us=now.get('us'), best=best, best_us=best and ok[best])
    log(f"{name:20} {nbytes / 1e6:7.1f} MB  default {now.get('us') or float('nan'):7.1f} µs "
        f"({now.get('TBps') or float('nan'):.2f} TB/s)  best {best}: {rows['best_us'] or float('nan'):7.1f} µs "
        f"({nbytes / rows['best_us'] / 1e6 if best else float('nan'):.2f} TB/s)")
    top = sorted(ok.items(), key=lambda kv: kv[1])[:5]
    log('   fastest five: ' + ', '.join(f'{k} {v:.1f}' for k, v in top))
    save()

def shapes():
    for name, ctx in SHAPES.items(): shape(name, ctx)

run_section(shapes, R, save)
log('done')
