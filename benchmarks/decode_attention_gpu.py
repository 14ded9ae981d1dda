#!/usr/bin/env python3
"""The one-launch decode attention of chapter 10c (`rope_decode`) against the launches a decode step makes without
it (`qk_norm_rope`, then `paged_decode` storing the new K/V, then its combine when it splits), on Qwen3-0.6B's heads
(16 query and 8 KV heads of 128, bf16, blocks of 16): the same caches and outputs, then µs of one layer replayed from
a CUDA graph, by sequences in the step and context length.

Run from the repository root:  PYTHONPATH=.:benchmarks python3 benchmarks/decode_attention_gpu.py
Writes decode_attention_gpu.json to $OUT if set, else to benchmarks/results/.
"""
import torch
from triton.testing import do_bench_cudagraph
from minillm.kernels.decode import rope_decode
from minillm.kernels.fused import qk_norm_rope
from minillm.kernels.attention import paged_decode
from minillm.layers import RotaryEmbedding
from helpers.bench_io import log, saver

R = dict(errors={}, rows=[])
save = saver(R, 'decode_attention_gpu')
hq, hkv, d, bs, dt, dev = 16, 8, 128, 16, torch.bfloat16, 'cuda'
rot = RotaryEmbedding(d, 1e6, 4096).build(dev)
g = torch.Generator(dev).manual_seed(0)
for ctx in (320, 800):
    for S in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        w = -(-ctx // bs)
        kc = torch.randn(S * w + 1, bs, hkv, d, dtype=dt, device=dev, generator=g)
        vc = torch.randn(kc.shape, dtype=dt, device=dev, generator=g)
        bt = torch.randperm(S * w, device=dev, generator=g).view(S, w).int()
        lens = torch.full((S,), ctx, dtype=torch.int32, device=dev)
        slot = (bt[:, (ctx - 1) // bs] * bs + (ctx - 1) % bs).long()
        qkv = torch.randn(S, (hq + 2 * hkv) * d, dtype=dt, device=dev, generator=g)
        qw, kw = (torch.rand(d, dtype=dt, device=dev, generator=g) + 0.5 for _ in range(2))
        cos, sin = rot.cos[lens.long() - 1], rot.sin[lens.long() - 1]
        q, k, v = (t.view(S, -1, d) for t in qkv.split([hq * d, hkv * d, hkv * d], -1))
        o1, o2 = torch.empty(S, hq, d, dtype=dt, device=dev), torch.empty(S, hq, d, dtype=dt, device=dev)
        kc2, vc2 = kc.clone(), vc.clone()
        one = lambda: rope_decode(qkv, qw, kw, cos, sin, 1e-6, kc, vc, bt, lens, slot, hq, out=o1)
        def two():
            qr, kr = qk_norm_rope(q, k, qw, kw, cos, sin, 1e-6)
            return paged_decode(qr, kc2, vc2, bt, lens, out=o2, k=kr, v=v, slot_mapping=slot)
        one()
        two()
        torch.cuda.synchronize()
        same = bool(torch.equal(kc, kc2) and torch.equal(vc, vc2))
        diff = (o1.float() - o2.float()).abs().max().item()
        t1, t2 = (do_bench_cudagraph(f, rep=30) * 1e3 for f in (one, two))
        R['rows'].append(dict(S=S, ctx=ctx, one_us=t1, two_us=t2, caches_equal=same, max_diff=diff))
        log(f"ctx {ctx:4} S {S:3}: one launch {t1:7.1f} µs, without {t2:7.1f} µs ({t2 / t1:4.2f}x); "
            f"caches equal {same}, max diff {diff:.2e}")
        save()
