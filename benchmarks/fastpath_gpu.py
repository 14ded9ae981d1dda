#!/usr/bin/env python3
"""GPU checks and timings of the engine's fast path on random-weight models of the real shapes.

Run from the repository root:  PYTHONPATH=.:benchmarks python3 benchmarks/fastpath_gpu.py [--only=gemv,fp32,...]
Sections (each runs even if an earlier one failed; failures are recorded):
  gemv      the dense GEMV (minillm.kernels.gemv.gemv) against cuBLAS F.linear at M = 1, Qwen3-0.6B and 8B shapes,
            over candidate tile configurations (CUDA-graph replays over enough weight copies to defeat L2)
  int8_gemv the int8 GEMV (same kernel) at Qwen3-8B shapes over tile candidates, against cuBLAS bf16
  fp32      correctness: fast path (Triton attention, fused ops, GEMV, graphs) == PyTorch path == transformers,
            8 prompts x 32 tokens as one batch and one at a time (batch 1 takes the GEMV); also with n-gram
            speculation (k = 3, verify graphs)
  bf16      greedy agreement with transformers in bf16 (Qwen3-0.6B, 16 prompts x 32 tokens, batched and one at a time)
  rmsnorm   Qwen3-0.6B graphed decode step with the CUDA RMSNorm extension against the Triton fused norm
  steps     Qwen3-0.6B bf16 decode-step time per bucket, graphs with fused ops, with and without the GEMV
  pdl       the same step with programmatic dependent launch off and on
  gemv_pre  the same step with one and two weight chunks of each GEMV loaded before the PDL wait
  prefill   the top GPU operations of a 64 x 256-token prefill
  e2e       Qwen3-0.6B bf16, 256-token prompts -> 128 tokens, batch 1 and 64: tokens/s (median of 3) with the
            engine's overlap of CPU and GPU work off and on, and the per-phase profile (minillm.profiling)
  int8_8b   Qwen3-8B batch 1, bf16 engine against int8 engine, with the weight-read floor from the measured copy rate
Writes fastpath_gpu.json to $OUT if set, else to benchmarks/results/.
"""
import gc, sys, time, statistics
import torch
import torch.nn.functional as F
import minillm.quant as Q
import minillm.kernels.fused as FK
import minillm.kernels.gemv as GV
import minillm.kernels.attention as A
from minillm import LLM, SamplingParams
from minillm.loading import random_checkpoint, PRESETS
from minillm.profiling import profile_engine
from minillm.kernels.gemv import use_fused_kernels
from minillm.cuda_graphs import capture_graph
from minillm.bench import measure_bandwidth, weight_bytes, model_config
from helpers.graph_timing import graph_us as gtime      # benchmarks/helpers/graph_timing.py

from helpers.bench_io import log, saver, run_section, decoding, place     # benchmarks/helpers/bench_io.py

R = dict(argv=sys.argv, errors={})
save = saver(R, 'fastpath_gpu')

def timed(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    r = fn()
    torch.cuda.synchronize()
    return r, time.perf_counter() - t0

GEMV_SHAPES = {'0.6b qkv': (1024, 4096), '0.6b o': (2048, 1024), '0.6b gate_up': (1024, 6144), '0.6b down': (3072, 1024),
               '8b qkv': (4096, 6144), '8b o': (4096, 4096), '8b gate_up': (4096, 24576), '8b down': (12288, 4096)}
CONFIGS = [(2, 1024, 4), (4, 1024, 4), (4, 512, 2), (4, 512, 4), (8, 512, 4), (16, 512, 8), (2, 512, 2), (8, 256, 4)]

def gemv():
    L2, res = 60 * 2**20, []
    for name, (K, N) in GEMV_SHAPES.items():
        copies = max(8, -(-3 * L2 // (2 * N * K)))
        ws = [torch.randn(N, K, device='cuda', dtype=torch.bfloat16) * 0.02 for _ in range(copies)]
        x = torch.randn(1, K, device='cuda', dtype=torch.bfloat16)
        ref = F.linear(x.float(), ws[0].float())
        row = dict(shape=name, K=K, N=N, cublas=gtime([lambda w=w: F.linear(x, w) for w in ws]))
        for c in CONFIGS:
            err = ((GV.gemv(x, ws[0], config=c).float() - ref).norm() / ref.norm()).item()
            assert err < 1e-2, (name, c, err)
            row[str(c)] = gtime([lambda w=w: GV.gemv(x, w, config=c) for w in ws])
        res.append(row)
        best = min(CONFIGS, key=lambda c: row[str(c)])
        log(f"{name:13} cuBLAS {row['cublas']:6.1f} µs  GEMV {row[str(GV.GEMV_CONFIG)]:6.1f} (default {GV.GEMV_CONFIG})  best {row[str(best)]:6.1f} {best}"
            f"  {2 * N * K / row[str(best)] / 1e3:5.0f} GB/s")
        del ws
        torch.cuda.empty_cache()
    tot = {str(c): sum(r[str(c)] for r in res if r['shape'].startswith('0.6b')) for c in CONFIGS}
    R['gemv'], R['gemv_06b_total'] = res, dict(cublas=sum(r['cublas'] for r in res if r['shape'].startswith('0.6b')), **tot)
    log('0.6b layer total (µs):', {k: round(v, 1) for k, v in R['gemv_06b_total'].items()})

INT8_CONFIGS = [(8, 512, 4, 1), (4, 512, 2, 1), (16, 512, 8, 1), (4, 1024, 4, 1), (8, 1024, 8, 1), (4, 256, 2, 1)]

def int8_gemv():
    "The int8 GEMV (the same kernel, INT8) at Qwen3-8B shapes over tile candidates, against cuBLAS bf16."
    L2, res = 60 * 2**20, []
    for name, (K, N) in [(k, v) for k, v in GEMV_SHAPES.items() if k.startswith('8b')]:
        copies = max(8, -(-3 * L2 // (N * K)))
        qs = [Q.quantize_weight(torch.randn(N, K, device='cuda', dtype=torch.bfloat16) * 0.02) for _ in range(copies)]
        ws = [Q.dequantize_weight(q, s) for q, s in qs[:1]]
        x = torch.randn(1, K, device='cuda', dtype=torch.bfloat16)
        ref = F.linear(x.float(), ws[0].float())
        dense = [torch.randn(N, K, device='cuda', dtype=torch.bfloat16) for _ in range(max(8, -(-3 * L2 // (2 * N * K))))]
        row = dict(shape=name, K=K, N=N, cublas_bf16=gtime([lambda w=w: F.linear(x, w) for w in dense]))
        del dense
        for c in INT8_CONFIGS:
            out = torch.empty(1, N, device='cuda', dtype=torch.bfloat16)
            Q.int8_matmul(x, *qs[0], config=(1, *c), out=out)
            err = ((out.float() - ref).norm() / ref.norm()).item()
            assert err < 1e-2, (name, c, err)
            row[str(c)] = gtime([lambda q=q, s=s: Q.int8_matmul(x, q, s, config=(1, *c), out=out) for q, s in qs])
        row['w8_linear'] = gtime([lambda q=q, s=s: Q.w8_linear(x, q, s) for q, s in qs])
        with A.pdl(False):                                # the same chain launched plainly
            row['w8_linear_no_pdl'] = gtime([lambda q=q, s=s: Q.w8_linear(x, q, s) for q, s in qs])
        res.append(row)
        best = min(INT8_CONFIGS, key=lambda c: row[str(c)])
        log(f"{name:13} cuBLAS bf16 {row['cublas_bf16']:6.1f} µs  int8 default {row['w8_linear']:6.1f} ({row['cublas_bf16'] / row['w8_linear']:.2f}x)"
            f"  best {row[str(best)]:6.1f} {best} ({row['cublas_bf16'] / row[str(best)]:.2f}x, {N * K / row[str(best)] / 1e3:5.0f} GB/s)"
            f"  default without PDL {row['w8_linear_no_pdl']:6.1f} ({row['cublas_bf16'] / row['w8_linear_no_pdl']:.2f}x)")
        del qs
        torch.cuda.empty_cache()
    R['int8_gemv'] = res

def fp32():
    g = torch.Generator().manual_seed(0)
    ck = random_checkpoint(**PRESETS['qwen3-0.6b'], dtype=torch.float32, device='cuda')
    prompts = [torch.randint(0, 151643, (n,), generator=g).tolist() for n in (5, 64, 200, 17, 300, 1, 90, 33)]
    sp = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
    kw = dict(dtype='float32', device='cuda', num_kv_blocks=2048, max_model_len=4096, max_num_seqs=64)
    fast, ref = LLM(str(ck), **kw), LLM(str(ck), attention_backend='torch', cuda_graphs='off', **kw)
    toks = lambda llm, ps: [o.outputs[0].token_ids for o in llm.generate(ps, sp, use_tqdm=False)]
    a, a1, b = toks(fast, prompts), [toks(fast, [p])[0] for p in prompts], toks(ref, prompts)
    del fast, ref
    torch.cuda.empty_cache()
    spec = LLM(str(ck), speculative_tokens=3, **kw)                     # verify graphs, n-gram drafts
    s, s1 = toks(spec, prompts), [toks(spec, [p])[0] for p in prompts]
    del spec
    torch.cuda.empty_cache()
    from transformers import AutoModelForCausalLM
    hf = AutoModelForCausalLM.from_pretrained(ck, dtype=torch.float32).cuda().eval()
    c = [hf.generate(torch.tensor([p], device='cuda'), max_new_tokens=32, min_new_tokens=32, do_sample=False, pad_token_id=0)[0, len(p):].tolist() for p in prompts]
    R['fp32'] = dict(batch_eq_torch=sum(x == y for x, y in zip(a, b)), batch_eq_hf=sum(x == y for x, y in zip(a, c)),
                     single_eq_hf=sum(x == y for x, y in zip(a1, c)), speculative_batch_eq_hf=sum(x == y for x, y in zip(s, c)),
                     speculative_single_eq_hf=sum(x == y for x, y in zip(s1, c)))
    log('fp32 of 8:', R['fp32'])
    del hf
    torch.cuda.empty_cache()

LLM06 = {}
def llm06():
    if 'llm' not in LLM06:
        ck = random_checkpoint(**PRESETS['qwen3-0.6b'], dtype=torch.bfloat16, device='cuda')
        LLM06['llm'] = LLM(str(ck), dtype='bfloat16', device='cuda', gpu_memory_utilization=0.5, max_num_seqs=64, max_model_len=4096)
    return LLM06['llm']

def step_ms(fn, n=50):
    "ms per call of `fn` (a graph replay), back to back."
    for _ in range(3): fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n): fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e3

def packed_decode(eng, b):
    "A real decode step of `b` sequences packed where graph ('decode', b) reads it; the request ids, to abort."
    ids, sched = decoding(eng, b, 'step')
    place(eng, eng.runner.pack(sched, eng.block_manager))     # padded to bucket b
    return ids

def recaptured(r, b):
    "The engine's decode step of bucket `b` (the static batch its graph reads) recaptured: (graph, logits)."
    return capture_graph(lambda: r.forward(r.graphs.static[r.graphs.key('decode', b)]), r.graphs.pool)

def step_table(variants):
    "ms per graphed Qwen3-0.6B decode step at batch 1, 8 and 64 for each `(label, setup)`: `setup()`, then recapture."
    llm = llm06()
    eng = llm.engine
    llm.generate([list(range(1000, 1256))] * 64, SamplingParams(temperature=0, max_tokens=4, ignore_eos=True), use_tqdm=False)
    out = {label: {} for label, _ in variants}
    for b in (1, 8, 64):
        ids = packed_decode(eng, b)
        for label, setup in variants:
            setup()
            g = recaptured(eng.runner, b)[0]
            out[label][b] = step_ms(g.replay)
            del g
            torch.cuda.empty_cache()
        eng.abort_request(ids)
    return out

def steps():
    use = lambda on: use_fused_kernels(llm06().engine.model, gemv=on)
    R['step_ms'] = step_table([(f'gemv={on}', lambda on=on: use(on)) for on in (False, True)])
    log('graph step ms (fused ops):', R['step_ms'])

def pdl():
    "Graphed decode step with programmatic dependent launch off and on (the graphs are recaptured for each)."
    R['pdl_step_ms'] = step_table([(f'pdl={on}', lambda on=on: setattr(A, 'USE_PDL', on)) for on in (False, True)])
    log('graph step ms, PDL off / on:', R['pdl_step_ms'])

def gemv_pre():
    "The same step with one and two weight chunks of each GEMV loaded before the PDL wait (GV.GEMV_PRE)."
    R['gemv_pre_step_ms'] = step_table([(f'pre={p}', lambda p=p: setattr(GV, 'GEMV_PRE', (p, p))) for p in (1, 2)])
    log('graph step ms, GEMV_PRE 1 / 2:', R['gemv_pre_step_ms'])

def bf16():
    "Greedy agreement of the fast path with transformers in bf16: 16 prompts x 32 tokens, batched and one at a time."
    g = torch.Generator().manual_seed(3)
    ck = random_checkpoint(**PRESETS['qwen3-0.6b'], dtype=torch.bfloat16, device='cuda')
    prompts = [torch.randint(0, 151643, (int(n),), generator=g).tolist() for n in torch.randint(8, 300, (16,), generator=g)]
    sp = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
    llm = LLM(str(ck), dtype='bfloat16', device='cuda', num_kv_blocks=2048, max_model_len=4096, max_num_seqs=64)
    a = [o.outputs[0].token_ids for o in llm.generate(prompts, sp, use_tqdm=False)]
    a1 = [llm.generate([p], sp, use_tqdm=False)[0].outputs[0].token_ids for p in prompts]
    del llm
    torch.cuda.empty_cache()
    from transformers import AutoModelForCausalLM
    hf = AutoModelForCausalLM.from_pretrained(ck, dtype=torch.bfloat16).cuda().eval()
    c = [hf.generate(torch.tensor([p], device='cuda'), max_new_tokens=32, min_new_tokens=32, do_sample=False, pad_token_id=0)[0, len(p):].tolist() for p in prompts]
    prefix = lambda x, y: next((i for i, (u, v) in enumerate(zip(x, y)) if u != v), len(x))
    R['bf16'] = dict(batch_eq_hf=sum(x == y for x, y in zip(a, c)), single_eq_hf=sum(x == y for x, y in zip(a1, c)),
                     batch_eq_single=sum(x == y for x, y in zip(a, a1)), mean_prefix_batch=statistics.mean(prefix(x, y) for x, y in zip(a, c)),
                     mean_prefix_single=statistics.mean(prefix(x, y) for x, y in zip(a1, c)), n=len(prompts), tokens=32)
    log('bf16 of 16:', R['bf16'])
    del hf
    torch.cuda.empty_cache()

def rmsnorm():
    "The engine's decode step with the CUDA RMSNorm extension in place of the Triton fused norm."
    import helpers.rmsnorm_cuda as RC                          # benchmarks/helpers/rmsnorm_cuda.py: chapter 14's kernel
    from minillm.layers import RMSNorm
    t0 = time.time()
    RC.load()
    log(f'CUDA RMSNorm extension built or loaded ({time.time() - t0:.0f} s)')
    llm = llm06()
    eng = llm.engine
    llm.generate([list(range(1000, 1256))] * 64, SamplingParams(temperature=0, max_tokens=4, ignore_eos=True), use_tqdm=False)
    out, logits = {'triton': {}, 'cuda': {}}, {}
    for b in (1, 64):
        ids = packed_decode(eng, b)
        for name, k in (('triton', FK.rms_norm), ('cuda', RC.rms_norm)):
            for m in eng.model.modules():
                if isinstance(m, RMSNorm): m.kernel = k
            g, o = recaptured(eng.runner, b)
            out[name][b] = step_ms(g.replay)
            if b == 64: logits[name] = o.float().clone()
            del g, o
            torch.cuda.empty_cache()
        eng.abort_request(ids)
    for m in eng.model.modules():
        if isinstance(m, RMSNorm): m.kernel = FK.rms_norm
    out['max_rel_logit_diff_b64'] = ((logits['cuda'] - logits['triton']).abs().max() / logits['triton'].abs().max()).item()
    R['rmsnorm_engine'] = out
    log('graph step ms, Triton vs CUDA RMSNorm:', out)

def prefill():
    "Where the time of one 64 x 256-token prefill step goes."
    llm = llm06()
    ps = torch.randint(0, 151643, (64, 256), generator=torch.Generator().manual_seed(5)).tolist()
    one = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True)
    llm.generate(ps, one, use_tqdm=False)
    dts = [timed(lambda: llm.generate(ps, one, use_tqdm=False))[1] for _ in range(3)]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        llm.generate(ps, one, use_tqdm=False)
        torch.cuda.synchronize()
    ev = sorted(prof.key_averages(), key=lambda e: -getattr(e, 'self_device_time_total', 0))
    R['prefill'] = dict(seconds=dts, top=[(e.key, e.self_device_time_total / 1e3, e.count) for e in ev[:15]])
    log(f"prefill 64 x 256 (generate with max_tokens=1): {statistics.median(dts) * 1e3:.1f} ms; GPU kernel time "
        f"{sum(e.self_device_time_total for e in ev) / 1e3:.1f} ms")
    for k, ms, n in R['prefill']['top']: print(f"   {ms:8.2f} ms {n:6} x {k[:90]}")
    # the eager forward alone on 1024 packed tokens (16 per sequence): CPU-bound? with and without the Triton fused ops
    from minillm.scheduler import Sequence
    seqs = [Sequence(10**6 + i, p[:16], one) for i, p in enumerate(ps)]
    eng = llm.engine
    bm = eng.block_manager
    for q in seqs: bm.allocate(q.seq_id, q.token_ids, 16)
    sched = [(q, 16) for q in seqs]
    r, out = eng.runner, {}
    for fused in (True, False):
        use_fused_kernels(eng.model, fused)
        batch = r.pack(sched, bm)                          # 'mixed': no graph, eager
        r.forward(batch)
        t = [timed(lambda: r.forward(batch))[1] * 1e3 for _ in range(5)]
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            r.forward(batch)
            torch.cuda.synchronize()
        gpu = sum(e.self_device_time_total for e in prof.key_averages()) / 1e3
        t0 = time.perf_counter()
        r.pack(sched, bm)
        prep = (time.perf_counter() - t0) * 1e3
        out[f'fused={fused}'] = dict(forward_ms=statistics.median(t), gpu_ms=gpu, prepare_ms=prep)
        log(f"eager forward of 1024 tokens, fused={fused}: {statistics.median(t):.2f} ms wall, {gpu:.2f} ms of GPU kernels; prepare {prep:.2f} ms")
    use_fused_kernels(eng.model)
    for q in seqs: bm.free(q.seq_id)
    R['prefill']['eager_forward'] = out

def e2e():
    llm, g = llm06(), torch.Generator().manual_seed(1)
    sp = SamplingParams(temperature=0, max_tokens=128, ignore_eos=True)
    for B in (1, 64):
        ps = torch.randint(0, 151643, (B, 256), generator=g).tolist()
        llm.generate(ps, SamplingParams(temperature=0, max_tokens=8, ignore_eos=True), use_tqdm=False)
        off = []
        for overlap in (False, True):                      # the engine's default last
            llm.config.overlap = overlap
            dts = [timed(lambda: llm.generate(ps, sp, use_tqdm=False))[1] for _ in range(3)]
            if not overlap: off = dts
        prof = profile_engine(llm, ps, sp)
        R[f'bs{B}'] = dict(tok_s=B * 128 / statistics.median(dts), times=dts, tok_s_no_overlap=B * 128 / statistics.median(off),
                           times_no_overlap=off, profile=prof)
        log(f"batch {B:3}: {B * 128 / statistics.median(dts):8.0f} tok/s (overlap off: {B * 128 / statistics.median(off):8.0f}); per step (ms): " +
            ', '.join(f"{k} {v:.3f}" for k, v in prof['phases_ms_per_step'].items()) +
            f"; synced total {prof['synced_wall_ms_per_step']:.3f}; GPU busy {prof['gpu_busy_fraction']:.0%}")

def int8_8b():
    LLM06.clear()
    gc.collect()
    torch.cuda.empty_cache()
    bw = measure_bandwidth('cuda')['bytes_per_s']
    ck = random_checkpoint(**PRESETS['qwen3-8b'], dtype=torch.bfloat16, device='cuda')
    log('8b checkpoint ready')
    cfg, sp = model_config('qwen3-8b'), SamplingParams(temperature=0, max_tokens=128, ignore_eos=True)
    ps = [torch.randint(0, 151643, (256,), generator=torch.Generator().manual_seed(2)).tolist()]
    out = dict(bandwidth=bw)
    for q in (None, 'int8'):
        llm = LLM(str(ck), dtype='bfloat16', device='cuda', quantization=q, max_num_seqs=8, max_model_len=4096, num_kv_blocks=1024)
        llm.generate(ps, SamplingParams(temperature=0, max_tokens=8, ignore_eos=True), use_tqdm=False)
        llm.config.overlap = False
        off = [timed(lambda: llm.generate(ps, sp, use_tqdm=False))[1] for _ in range(3)]
        llm.config.overlap = True
        dts = [timed(lambda: llm.generate(ps, sp, use_tqdm=False))[1] for _ in range(3)]
        quant = [m.weight for m in llm.engine.model.modules() if isinstance(m, Q.QuantLinear)]
        wb = weight_bytes(cfg, 2) - sum(t.numel() for t in quant)   # int8: 1 byte per weight
        floor_ms = wb / bw * 1e3
        out[q or 'bf16'] = dict(tok_s=128 / statistics.median(dts), ms_per_token=statistics.median(dts) / 128 * 1e3, floor_ms=floor_ms,
                                weight_bytes=wb, times=dts, tok_s_no_overlap=128 / statistics.median(off))
        log(f"8b {q or 'bf16'}: {128 / statistics.median(dts):.1f} tok/s, {statistics.median(dts) / 128 * 1e3:.2f} ms/token, weight floor {floor_ms:.2f} ms"
            f" ({100 * floor_ms / (statistics.median(dts) / 128 * 1e3):.0f}% of floor); overlap off {128 / statistics.median(off):.1f} tok/s")
        del llm
        gc.collect()
        torch.cuda.empty_cache()
    out['int8_speedup'] = out['int8']['tok_s'] / out['bf16']['tok_s']
    R['8b'] = out
    log(f"8b int8 / bf16 = {out['int8_speedup']:.2f}x")

SECTIONS = dict(gemv=gemv, int8_gemv=int8_gemv, fp32=fp32, bf16=bf16, rmsnorm=rmsnorm, steps=steps, pdl=pdl, gemv_pre=gemv_pre, prefill=prefill, e2e=e2e, int8_8b=int8_8b)
only = [a.split('=', 1)[1].split(',') for a in sys.argv if a.startswith('--only=')]
for fn in [f for k, f in SECTIONS.items() if not only or k in only[0]]: run_section(fn, R, save)
log('done; errors in:', list(R['errors']) or 'none')
