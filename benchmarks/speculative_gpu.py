#!/usr/bin/env python3
"""Where the time of n-gram speculation goes, on random-weight Qwen3-0.6B (bf16) on a CUDA GPU.

Run from the repository root:  PYTHONPATH=.:benchmarks python3 benchmarks/speculative_gpu.py [--only=rows,steps,e2e] [--ks=0,3] [--batches=1,8]
Sections (each runs even if an earlier one failed; failures are recorded):
  rows   the GEMV kernels at 1-8 rows against cuBLAS F.linear, Qwen3-0.6B and 8B layer shapes, tile candidates (a
         verify step of one sequence has k + 1 rows); the best 0.6B tile is used by the sections after it
  steps  graph replay time of the decode step (1 row per sequence) and the verify step (k + 1 rows) per batch
  e2e    256-token random prompts -> 128 tokens at batch 1, 8, 64 for k = 0 (off) .. 4, speculating at every batch
         size (speculative_max_batch=64): tokens/s (median of 3),
         drafts accepted, verify and plain steps, and the wall time the host spends per verify step outside the GPU
Writes speculative_gpu.json to $OUT if set, else to benchmarks/results/.
"""
import sys, time, statistics
import torch
import torch.nn.functional as F
import minillm.kernels.gemv as GV
from minillm import LLM, SamplingParams
from minillm.loading import random_checkpoint, PRESETS
from helpers.graph_timing import graph_us as gtime      # benchmarks/helpers/graph_timing.py

from helpers.bench_io import log, saver, run_section, decoding, place     # benchmarks/helpers/bench_io.py

R = dict(argv=sys.argv, errors={})
save = saver(R, 'speculative_gpu')
SHAPES = {'0.6b qkv': (1024, 4096), '0.6b o': (2048, 1024), '0.6b gate_up': (1024, 6144), '0.6b down': (3072, 1024),
          '8b qkv': (4096, 6144), '8b o': (4096, 4096), '8b gate_up': (4096, 24576), '8b down': (12288, 4096)}
ROW_CONFIGS = [(2, 1024, 4), (4, 512, 4), (2, 512, 4), (1, 1024, 4), (2, 1024, 8), (4, 1024, 8), (8, 256, 4), (1, 512, 2)]
MS = (1, 2, 3, 4, 5, 8)

def rows():
    "GEMV (one row: the one-row kernel; more: the several-row kernel over ROW_CONFIGS) against cuBLAS; sets the best 0.6B config."
    L2, res = 60 * 2**20, []
    for name, (K, N) in SHAPES.items():
        ws = [torch.randn(N, K, device='cuda', dtype=torch.bfloat16) * 0.02 for _ in range(max(8, -(-3 * L2 // (2 * N * K))))]
        for M in MS:
            x = torch.randn(M, K, device='cuda', dtype=torch.bfloat16)
            ref = F.linear(x.float(), ws[0].float())
            r = dict(shape=name, M=M, cublas=gtime([lambda w=w: F.linear(x, w) for w in ws]))
            for c in ([None] if M == 1 else ROW_CONFIGS):
                assert ((GV.gemv(x, ws[0], config=c).float() - ref).norm() / ref.norm()).item() < 1e-2, (name, M, c)
                r[str(c)] = gtime([lambda w=w: GV.gemv(x, w, config=c) for w in ws])
            res.append(r)
            best = min((k for k in r if k.startswith('(') or k == 'None'), key=r.get)
            log(f"{name:12} M={M}: cuBLAS {r['cublas']:6.1f} µs  GEMV best {r[best]:6.1f} µs {best}")
        del ws
        torch.cuda.empty_cache()
    R['rows'] = res
    tot = lambda M, k, pre: sum(r[k] for r in res if r['M'] == M and r['shape'].startswith(pre))
    for pre in ('0.6b', '8b'):
        for M in MS:
            keys = ['None'] if M == 1 else [str(c) for c in ROW_CONFIGS]
            b = min(keys, key=lambda k: tot(M, k, pre))
            log(f"{pre} layer, M={M}: cuBLAS {tot(M, 'cublas', pre):6.1f} µs  GEMV {tot(M, b, pre):6.1f} µs with {b}"
                + ('' if M == 1 else f" (default {tot(M, str(GV.GEMV_ROWS_CONFIG), pre):6.1f})"))
    best = min(ROW_CONFIGS, key=lambda c: sum(tot(M, str(c), '0.6b') for M in (2, 3, 4, 5)))
    R['best_rows_config'] = best
    log('best several-row config for 0.6B, M = 2..5:', best, '(used below)')
    GV.GEMV_ROWS_CONFIG = best

CK = None
def ckpt():
    global CK
    CK = CK or random_checkpoint(**PRESETS['qwen3-0.6b'], dtype=torch.bfloat16, device='cuda')
    return CK

def engine(k, **kw): return LLM(str(ckpt()), dtype='bfloat16', device='cuda', speculative_tokens=k, num_kv_blocks=4096, max_model_len=4096, max_num_seqs=64, speculative_max_batch=64, **kw)

def replay_ms(g, n=50):
    for _ in range(3): g.replay()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n): g.replay()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e3

def packed(eng, b, k):
    """Request ids of `b` decoding sequences, and functions that pack their decode step and their verify
    step (`k` drafts each) where graph ('decode', b) and ('verify', b) read it."""
    ids, sched = decoding(eng, b, 'steps')
    def decode(): place(eng, eng.runner.pack(sched, eng.block_manager))
    drafts = [[s.token_ids[-1]] * k for s, _ in sched]
    ok = all(eng.scheduler.lookahead(s, d) for (s, _), d in zip(sched, drafts))   # the drafts' cache slots
    assert ok, 'no KV blocks for the drafts'
    def verify(): place(eng, eng.runner.pack(sched, eng.block_manager, drafts=drafts))
    return ids, decode, verify

def steps():
    res = []
    for k in (1, 3):
        llm = engine(k)
        eng = llm.engine
        llm.generate([list(range(1000, 1256))] * 64, SamplingParams(temperature=0, max_tokens=4, ignore_eos=True), use_tqdm=False)
        G = eng.runner.graphs
        for b in (1, 8, 64):
            ids, decode, verify = packed(eng, b, k)
            decode()
            decode_ms = replay_ms(G.graphs[G.key('decode', b)])
            verify()
            r = dict(k=k, batch=b, decode_ms=decode_ms, verify_ms=replay_ms(G.graphs[G.key('verify', b)]))
            eng.abort_request(ids)
            res.append(r)
            log(f"k={k} batch {b:2}: decode step {r['decode_ms']:.3f} ms, verify step ({k + 1} rows a sequence) {r['verify_ms']:.3f} ms")
        del llm
        torch.cuda.empty_cache()
    R['steps'] = res

def e2e():
    torch.manual_seed(0)
    res = []
    for k in KS:
        llm = engine(k)
        spec, wall = llm.engine.stepper if k else None, [0.0]   # the SpeculativeStep strategy
        if spec is not None:                                     # wall time of each verify step (GPU + host)
            def timed(*a, _f=spec.verify):
                t = time.perf_counter()
                out = _f(*a)
                wall[0] += time.perf_counter() - t
                return out
            spec.verify = timed
        for b in BATCHES:
            prompts = [torch.randint(0, 151643, (256,)).tolist() for _ in range(b)]
            sp = SamplingParams(temperature=0, max_tokens=128, ignore_eos=True)
            llm.generate(prompts, sp, use_tqdm=False)             # warm-up
            ts, info = [], {}
            for _ in range(3):
                s0 = (spec.steps, spec.proposed, spec.accepted) if spec else None
                wall[0] = 0.0
                t = time.perf_counter()
                llm.generate(prompts, sp, use_tqdm=False)
                torch.cuda.synchronize()
                ts.append(time.perf_counter() - t)
                if spec: info = dict(verify_steps=spec.steps - s0[0], proposed=spec.proposed - s0[1], accepted=spec.accepted - s0[2], verify_wall_s=wall[0])
            r = dict(k=k, batch=b, tok_s=b * 128 / statistics.median(ts), times=ts, **info)
            if spec and info['verify_steps']:
                r['acceptance'] = info['accepted'] / max(1, info['proposed'])
                r['tokens_per_verify'] = (info['accepted'] + info['verify_steps'] * b) / info['verify_steps'] / b   # per sequence
                r['verify_ms'] = 1e3 * info['verify_wall_s'] / info['verify_steps']
            res.append(r)
            log(f"k={k} batch {b:2}: {r['tok_s']:8.0f} tok/s" + (f"  accepted {r['acceptance']:.0%}, {r['verify_steps']} verify steps,"
                f" {r['tokens_per_verify']:.2f} tokens/seq/verify, {r['verify_ms']:.2f} ms wall/verify" if 'acceptance' in r else ''))
        del llm
        torch.cuda.empty_cache()
    R['e2e'] = res
    base = {r['batch']: r['tok_s'] for r in res if r['k'] == 0}
    print(f"{'k':>2} " + ' '.join(f"{'b=' + str(b):>14}" for b in base))
    for k in sorted({r['k'] for r in res}):
        print(f"{k:>2} " + ' '.join(f"{r['tok_s']:7.0f} ({r['tok_s'] / base[r['batch']]:.2f}x)" for r in res if r['k'] == k))

def arg(name, default): return next((a.split('=', 1)[1].split(',') for a in sys.argv[1:] if a.startswith(f'--{name}=')), default)
KS, BATCHES = [int(x) for x in arg('ks', [0, 1, 2, 3, 4])], [int(x) for x in arg('batches', [1, 8, 64])]

if __name__ == '__main__':
    only = arg('only', ['rows', 'steps', 'e2e'])
    for name in only: run_section(globals()[name], R, save)
