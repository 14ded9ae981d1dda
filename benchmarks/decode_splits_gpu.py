#!/usr/bin/env python3
"""How many ways the paged decode kernel should split each sequence's keys in the last steps of the nano-vllm
workload, where fewer sequences, with longer contexts, are left: the automatic choice (two programs a
multiprocessor) against fixed splits, the combine launch included, on Qwen3-0.6B's heads (16 query and 8 KV heads of
128, bf16, blocks of 16). Each is checked against attention computed in fp32 by PyTorch, then timed from a CUDA graph.

Run from the repository root:  PYTHONPATH=.:benchmarks python3 benchmarks/decode_splits_gpu.py
Writes decode_splits_gpu.json to $OUT if set, else to benchmarks/results/.
"""
import torch
from triton.testing import do_bench_cudagraph
from minillm.kernels.attention import _launch_decode, _decode_config, _split_partials
from minillm.workloads import nanovllm_workload, request_lengths
from helpers.bench_io import log, saver
from helpers.paged_steps import paged_step, reference

R = dict(errors={}, rows=[])
save = saver(R, 'decode_splits_gpu')
hq, hkv, d = 16, 8, 128
plens, olens = request_lengths(nanovllm_workload())
g = torch.Generator('cuda').manual_seed(0)

for t in (500, 600, 700, 800, 850, 900, 950, 1000):
    ctxs = [p + t for p, o in zip(plens, olens) if o > t]
    q, kc, vc, bt, lens = paged_step(ctxs, hq, hkv, d, generator=g)
    S, ref, gb = len(ctxs), reference(q, kc, vc, bt, lens), sum(ctxs) * hkv * d * 4 / 1e9
    auto = _split_partials(None, torch.empty(S, hq, d, device='cuda'), hkv)[0]
    row = dict(t=t, S=S, ctx_mean=sum(ctxs) / S, auto=auto, us={}, max_err={})
    for sp in sorted({auto, 1, 2, 3, 4, 6, 8}):
        out = torch.empty_like(q)
        f = lambda: _launch_decode(q, kc, vc, bt, lens, None, out, sp, **_decode_config(q))
        f(); torch.cuda.synchronize()
        row['max_err'][sp] = (out.float() - ref.float()).abs().max().item()
        row['us'][sp] = min(do_bench_cudagraph(f, rep=30) * 1e3 for _ in range(2))
    best = min(row['us'], key=row['us'].get)
    row['best'] = best
    R['rows'].append(row)
    log(f"t {t:4} S {S:3} ctx {row['ctx_mean']:5.0f}: auto {auto} {row['us'][auto]:6.1f} µs "
        f"({gb / row['us'][auto] * 1e3:.2f} TB/s); best {best} {row['us'][best]:6.1f} µs "
        f"({gb / row['us'][best] * 1e3:.2f} TB/s); " + ' '.join(f"{k}:{v:.1f}" for k, v in row['us'].items())
        + f"; max error {max(row['max_err'].values()):.0e}")
    save()
