#!/usr/bin/env python3
"""The sampling kernel of chapter 10a (`sample_fused`) against the sampling chapter's `sample_simple` on Qwen-sized
logits: the same tokens (seeded rows, greedy rows, min-p rows), then µs per call at 1, 64 and 256 rows.

Run from the repository root:  PYTHONPATH=.:benchmarks python3 benchmarks/sampling_gpu.py
Writes sampling_gpu.json to $OUT if set, else to benchmarks/results/.
"""
import torch
from triton.testing import do_bench
from minillm.sampling import SamplingParams, sample_key, sample_simple
from minillm.kernels.fused import sample_fused
from helpers.bench_io import log, saver

R = dict(errors={}, rows={})
save = saver(R, 'sampling_gpu')
V, g = 151936, torch.Generator('cuda').manual_seed(0)
for B in (1, 64, 256):
    logits = (torch.randn(B, V, device='cuda', generator=g) * 3).to(torch.bfloat16)
    temps = [0.6, 0.0, 1.0, 0.8]                                       # tempered, greedy, tempered, min-p
    ps = [SamplingParams(temperature=temps[i % 4], min_p=0.05 * (i % 4 == 3), seed=i) for i in range(B)]
    keys = [sample_key(p.seed, 300 + i) for i, p in enumerate(ps)]
    same = torch.equal(sample_fused(logits, ps, keys), sample_simple(logits, ps, keys))
    shared = [SamplingParams(temperature=0.6)] * B                    # the shared stream: fresh keys every call
    t = {name: do_bench(f, warmup=20, rep=200, return_mode='median') * 1e3 for name, f in [
         ('fused', lambda: sample_fused(logits, shared, [None] * B, g)),
         ('simple', lambda: sample_simple(logits, shared, [None] * B, g))]}
    R['rows'][B] = dict(same_tokens=same, **t)
    log(f"B={B:3}  same tokens as sample_simple: {same}   "
        f"sample_fused {t['fused']:7.1f} µs   sample_simple {t['simple']:7.1f} µs")
    save()
