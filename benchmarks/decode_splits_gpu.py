#!/usr/bin/env python3
"""How many ways the decode attention should split each sequence's keys, on Qwen3-0.6B's heads (16 query and 8 KV
heads of 128, bf16, blocks of 16), the combine included; each variant is checked against attention computed in fp32
by PyTorch, then timed from a CUDA graph.

- `steps`: the last steps of the nano-vllm workload, where fewer sequences with longer contexts are left: the
  count for short contexts (two programs a multiprocessor) and `decode_splits`' count for the step's graph bucket
  and mean context against fixed splits.
- `rule`: `decode_splits`' counts for short and for long contexts against fixed splits, on steps of a graph bucket's
  sequences whose contexts are drawn around a mean (also Qwen2.5-0.5B's 14 and 2 heads of 64); up to 16 sequences by
  `rope_decode`, the engine's attention there.

Run from the repository root:  PYTHONPATH=.:benchmarks python3 benchmarks/decode_splits_gpu.py [steps] [rule]
Writes decode_splits_gpu.json to $OUT if set, else to benchmarks/results/.
"""
import sys, random, itertools, torch
from triton.testing import do_bench_cudagraph
from minillm.kernels.attention import paged_decode, decode_splits, LONG_CONTEXT
from minillm.kernels.decode import rope_decode, MAX_SEQS
from minillm.workloads import nanovllm_workload, request_lengths
from minillm.cuda_graphs import batch_buckets
from helpers.bench_io import log, saver, run_section
from helpers.paged_steps import paged_step, reference

R = dict(errors={}, rows=[], rule=[])
save = saver(R, 'decode_splits_gpu')
g = torch.Generator('cuda').manual_seed(0)

def timed(f, ref):
    "(max abs error against `ref`, µs a launch) of `f`, which writes its output and returns it."
    err = (f().float() - ref.float()).abs().max().item()
    return err, min(do_bench_cudagraph(f, rep=30) * 1e3 for _ in range(2))

def steps(hq=16, hkv=8, d=128):
    plens, olens = request_lengths(nanovllm_workload())
    for t in (500, 600, 700, 800, 850, 900, 950, 1000):
        ctxs = [p + t for p, o in zip(plens, olens) if o > t]
        q, kc, vc, bt, lens = paged_step(ctxs, hq, hkv, d, generator=g)
        S, ref, gb = len(ctxs), reference(q, kc, vc, bt, lens), sum(ctxs) * hkv * d * 4 / 1e9
        auto = decode_splits(S, hkv, q.device)
        b = next(x for x in batch_buckets(256) if x >= S)                 # the engine's graph
        rule = decode_splits(b, hkv, q.device, sum(ctxs) // S)
        row = dict(t=t, S=S, ctx_mean=sum(ctxs) / S, auto=auto, bucket=b, rule=rule, us={}, max_err={})
        for sp in sorted({auto, rule, 1, 2, 3, 4, 6, 8}):
            out = torch.empty_like(q)
            f = lambda: paged_decode(q, kc, vc, bt, lens, out=out, num_splits=sp)
            row['max_err'][sp], row['us'][sp] = timed(f, ref)
        best = row['best'] = min(row['us'], key=row['us'].get)
        R['rows'].append(row)
        log(f"t {t:4} S {S:3} ctx {row['ctx_mean']:5.0f}: auto {auto} {row['us'][auto]:6.1f} µs "
            f"({gb / row['us'][auto] * 1e3:.2f} TB/s); rule {rule} {row['us'][rule]:6.1f} µs; "
            f"best {best} {row['us'][best]:6.1f} µs "
            f"({gb / row['us'][best] * 1e3:.2f} TB/s); "
            + ' '.join(f"{k}:{v:.1f}" for k, v in row['us'].items())
            + f"; max error {max(row['max_err'].values()):.0e}")
        save()

def launcher(q, kc, vc, bt, lens, hkv):
    """`(launch, ref)` for a decode step: `launch(splits, out)` runs the engine's attention at its size (`rope_decode`
    up to `MAX_SEQS` sequences: no q/k norm, a rotation by zero, the new keys and values given and stored nowhere;
    else the decode kernel), `ref` is the attention the PyTorch reference gives, the new keys in the cache."""
    S, hq, d = q.shape
    if S > MAX_SEQS:
        return (lambda sp, out: paged_decode(q, kc, vc, bt, lens, out=out, num_splits=sp),
                reference(q, kc, vc, bt, lens))
    kn, vn = (torch.randn(S, hkv, d, dtype=q.dtype, device=q.device, generator=g) for _ in range(2))
    qkv = torch.cat([q.reshape(S, -1), kn.reshape(S, -1), vn.reshape(S, -1)], 1)
    cos, sin = torch.ones(S, d, dtype=q.dtype, device=q.device), torch.zeros(S, d, dtype=q.dtype, device=q.device)
    slots = torch.full((S,), -1, dtype=torch.int32, device=q.device)
    last = lens.long() - 1
    blk, off = bt[torch.arange(S, device=q.device), last // kc.shape[1]].long(), last % kc.shape[1]
    kc2, vc2 = kc.clone(), vc.clone()
    kc2[blk, off], vc2[blk, off] = kn, vn
    return (lambda sp, out: rope_decode(qkv, None, None, cos, sin, 1e-6, kc, vc, bt, lens, slots, hq, out=out,
                                        num_splits=sp),
            reference(q, kc2, vc2, bt, lens))

HEADS, SEQS, MEANS = ((16, 8, 128), (14, 2, 64)), (4, 8, 16, 32, 48, 64, 80, 96, 128, 160), (512, 768, 1024, 1536)

def rule():
    for (hq, hkv, d), S, mean in itertools.product(HEADS, SEQS, MEANS):
        rnd = random.Random(S * 7919 + mean)
        ctxs = [rnd.randint(mean // 2, 3 * mean // 2) for _ in range(S)]
        q, kc, vc, bt, lens = paged_step(ctxs, hq, hkv, d, generator=g)
        launch, ref = launcher(q, kc, vc, bt, lens, hkv)
        short, long = (decode_splits(S, hkv, q.device, c) for c in (0, LONG_CONTEXT))
        row = dict(heads=[hq, hkv, d], S=S, ctx_mean=sum(ctxs) / S, short=short, long=long,
                   kernel='rope_decode' if S <= MAX_SEQS else 'paged_decode', us={}, max_err={})
        for sp in sorted({short, long, 1, 2, 3, 4, 6, 8} | ({12, 16} if S <= MAX_SEQS else set())):
            out = torch.empty_like(q)
            row['max_err'][sp], row['us'][sp] = timed(lambda: launch(sp, out), ref)
        u, best = row['us'], min(row['us'], key=row['us'].get)
        row['best'] = best
        R['rule'].append(row)
        log(f"{hq}/{hkv}/{d} S {S:3} ctx {row['ctx_mean']:5.0f}: short {short} {u[short]:6.1f} µs, "
            f"long {long} {u[long]:6.1f} ({u[short] / u[long]:.3f}x); best {best} {u[best]:6.1f}; "
            f"max error {max(row['max_err'].values()):.0e}")
        save()

for name in sys.argv[1:] or ['steps', 'rule']: run_section(globals()[name], R, save)
