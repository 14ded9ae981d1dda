#!/usr/bin/env python3
"""The decode attention kernel storing the new token's K/V within its own launch, on the GPU: correctness against a
float64 reference (bf16, fp16, fp32; Qwen3-8B, Qwen3-0.6B and Qwen2.5-0.5B head layouts; 1 to 64 sequences, so from
16-way splits to none), repeatability over many replays of a CUDA graph, and the time of one layer's attention at
batch 1: store_kv, decode and combine launches against decode (storing) and combine.

Run from the repository root:  PYTHONPATH=.:benchmarks python3 benchmarks/decode_fused_gpu.py [--smoke]
--smoke runs tiny shapes on the CPU interpreter (checks the script itself).
Writes decode_fused_gpu.json to $OUT if set, else to benchmarks/results/.
"""
import sys
import torch
import triton
import minillm.kernels.attention as A
from helpers.graph_timing import graph_us      # benchmarks/helpers/graph_timing.py
from helpers.bench_io import log, saver, run_section

SMOKE = '--smoke' in sys.argv
DEV = 'cpu' if SMOKE else 'cuda'
R = dict(argv=sys.argv, errors={}, checks=[], repeat={}, timing={})
save = saver(R, 'decode_fused_gpu' + ('_smoke' if SMOKE else ''))
LAYOUTS = {'qwen3-8b': (32, 8, 128), 'qwen3-0.6b': (16, 8, 128), 'qwen2.5-0.5b': (14, 2, 64)}
TOL = {torch.float32: 1e-5, torch.float16: 3e-3, torch.bfloat16: 2e-2}

def problem(ctx, hq, hkv, d, dtype, bs=16):
    "Caches holding each sequence's keys but its last (that slot NaN), the last key/value and its slot, q, dense K/V."
    need = [triton.cdiv(c, bs) for c in ctx]
    perm = torch.randperm(sum(need) + 1, device=DEV)
    kc = torch.full((len(perm), bs, hkv, d), float('nan'), dtype=dtype, device=DEV)
    vc = kc.clone()
    bt = torch.full((len(ctx), max(need) + 1), int(perm[-1]), dtype=torch.int32, device=DEV)
    ks, vs, slots, used = [], [], [], 0
    for s, c in enumerate(ctx):
        bt[s, :need[s]] = perm[used:used + need[s]].int()
        used += need[s]
        sl = (bt[s, :need[s], None].long() * bs + torch.arange(bs, device=DEV)).flatten()[:c]
        ks.append(torch.randn(c, hkv, d, device=DEV).to(dtype))
        vs.append(torch.randn(c, hkv, d, device=DEV).to(dtype))
        kc.view(-1, hkv, d)[sl[:-1]], vc.view(-1, hkv, d)[sl[:-1]] = ks[-1][:-1], vs[-1][:-1]
        slots.append(int(sl[-1]))
    kn, vn = torch.stack([k[-1] for k in ks]), torch.stack([v[-1] for v in vs])
    q = torch.randn(len(ctx), hq, d, device=DEV).to(dtype)
    cl = torch.tensor(ctx, dtype=torch.int32, device=DEV)
    return kc, vc, bt, cl, q, kn, vn, torch.tensor(slots, device=DEV), ks, vs

def reference(q, ks, vs):
    "Dense GQA attention of each sequence's one query over all its keys, float64."
    out = []
    for s, (k, v) in enumerate(zip(ks, vs)):
        g = q.shape[1] // k.shape[1]
        k, v = k.double().repeat_interleave(g, 1), v.double().repeat_interleave(g, 1)        # [C, Hq, D]
        p = (torch.einsum('hd,chd->hc', q[s].double(), k) * q.shape[-1] ** -0.5).softmax(-1)
        out.append(torch.einsum('hc,chd->hd', p, v))
    return torch.stack(out)

def rel(a, b): return ((a.double() - b.double()).norm() / b.double().norm()).item()

def fused(kc, vc, bt, cl, q, kn, vn, slots):
    "paged_decode given the new K/V: it stores them."
    return A.paged_decode(q, kc, vc, bt, cl, k=kn, v=vn, slot_mapping=slots)

def three_launches(kc, vc, bt, cl, q, kn, vn, slots):
    "As before: store_kv, then the decode kernel (and its combine kernel) over the whole context."
    A.store_kv(kn, vn, kc, vc, slots)
    return A.paged_decode(q, kc, vc, bt, cl)

def correctness():
    sizes = [1, 3] if SMOKE else [1, 4, 64]
    for lname, (hq, hkv, d) in LAYOUTS.items():
        if SMOKE: hq, hkv = hq // hkv, 1
        for dtype in ((torch.float32,) if SMOKE else (torch.bfloat16, torch.float16, torch.float32)):
            if dtype == torch.float32 and lname != 'qwen3-8b' and not SMOKE: continue
            for S in sizes:
                g = torch.Generator().manual_seed(S)
                ctx = [1] + torch.randint(2, 80 if SMOKE else 3000, (S - 1,), generator=g).tolist()
                kc, vc, bt, cl, q, kn, vn, slots, ks, vs = problem(ctx, hq, hkv, d, dtype)
                ref = reference(q, ks, vs)
                new = fused(kc, vc, bt, cl, q, kn, vn, slots)
                stored = torch.equal(kc.view(-1, hkv, d)[slots], kn) and torch.equal(vc.view(-1, hkv, d)[slots], vn)
                old = three_launches(kc.clone(), vc.clone(), bt, cl, q, kn, vn, slots)
                r = dict(layout=lname, dtype=str(dtype), S=S, err=rel(new, ref), err_before=rel(old, ref),
                         vs_before=rel(new, old), stored=stored, finite=bool(new.isfinite().all()))
                r['ok'] = r['finite'] and stored and r['err'] < TOL[dtype]
                R['checks'].append(r)
                save()
                log(f"{lname:13} {str(dtype):15} S={S:2}: err {r['err']:.1e} (before {r['err_before']:.1e}), "
                    f"vs before {r['vs_before']:.1e}, stored {stored} -> {'ok' if r['ok'] else 'FAIL'}")

def repeat():
    "One graph of 64 storing decodes at batch 1 (16 splits, PDL as in the engine), replayed: bitwise the eager result?"
    hq, hkv, d = LAYOUTS['qwen3-8b']
    if SMOKE: hq, hkv = 4, 1
    p = problem([300], hq, hkv, d, torch.float32 if SMOKE else torch.bfloat16)
    ref = fused(*p[:8])
    n, reps = (4, 2) if SMOKE else (64, 50)
    outs = [torch.empty_like(ref) for _ in range(n)]
    def step():
        for o in outs: A.paged_decode(p[4], *p[:4], out=o, k=p[5], v=p[6], slot_mapping=p[7])
    bad = 0
    if SMOKE:
        for _ in range(reps):
            step()
            bad += sum(not torch.equal(o, ref) for o in outs)
    else:
        step()
        torch.cuda.synchronize()
        gr = torch.cuda.CUDAGraph()
        with torch.cuda.graph(gr): step()
        for _ in range(reps):
            for o in outs: o.fill_(float('nan'))
            gr.replay()
            torch.cuda.synchronize()
            bad += sum(not torch.equal(o, ref) for o in outs)
    R['repeat'] = dict(calls=n * reps, mismatches=bad)
    save()
    log(f"repeat: {n * reps} decodes from graph replays, {bad} differ from the eager result")

def timing():
    "µs per layer of attention at batch 1, Qwen3-8B heads, 36 layers' caches in one graph: three launches against two."
    hq, hkv, d = LAYOUTS['qwen3-8b']
    if SMOKE: hq, hkv = 4, 1
    for T in ((40,) if SMOKE else (300, 2000)):
        layers = [problem([T], hq, hkv, d, torch.float32 if SMOKE else torch.bfloat16) for _ in range(2 if SMOKE else 36)]
        res = R['timing'][T] = {}
        for label, fn in (('store_kv + decode + combine', three_launches), ('decode (storing) + combine', fused)):
            res[label] = graph_us([lambda p=p, fn=fn: fn(*p[:8]) for p in layers])
            log(f"context {T:5}: {label:32} {res[label]:6.2f} µs per layer")
        save()

for fn in (correctness, repeat, timing): run_section(fn, R, save)
print('\n| check | result |\n|---|---|')
print(f"| correctness | {sum(r['ok'] for r in R['checks'])}/{len(R['checks'])} ok, worst error {max((r['err'] for r in R['checks']), default=float('nan')):.1e} |")
print(f"| repeatability | {R['repeat'].get('mismatches')} of {R['repeat'].get('calls')} differ |")
for T, res in R['timing'].items():
    base = res.get('store_kv + decode + combine')
    for label, us in res.items(): print(f"| context {T}: {label} | {us:.2f} µs/layer ({base / us:.2f}x) |")
log('done; errors in:', list(R['errors']) or 'none')
