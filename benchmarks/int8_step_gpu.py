#!/usr/bin/env python3
"""Qwen3-8B batch-1 decode step, bf16 and int8 engines, over the launch choices of the int8 path: graph replay time
of one decode step for each variant, then end-to-end tokens/s for the fastest variants.

Run from the repository root:  PYTHONPATH=.:benchmarks python3 benchmarks/int8_step_gpu.py
Variants (each a set of switches, applied by patching module settings, then the graphs are captured again):
  pdl      int8 GEMVs launched with programmatic dependent launch (weights load before the wait)
  wide     the wide products (gate_up, an int8 head) by the int8 GEMV instead of the tensor-core kernel
  cfg      the int8 GEMV tile (BLOCK_N, BLOCK_K, num_warps)
  head     the output head quantised to int8 too
  fused    the fused decoder layer (norm + qkv, norm + gate_up + SiLU) at this hidden size
Writes int8_step_gpu.json to $OUT if set, else to benchmarks/results/.
"""
import gc, os, sys, json, math, time, traceback, statistics
import torch
import triton
import triton.language as tl
import minillm.quant as Q
import minillm.kernels.gemv as GV
from minillm.kernels.attention import pdl_options
from minillm.engine import LLM
from minillm.sampling import SamplingParams
from minillm.loading import random_checkpoint, PRESETS
from minillm.cuda_graphs import DecodeGraphs, PrefillGraphs

OUT = os.environ.get('OUT') or 'benchmarks/results'
os.makedirs(OUT, exist_ok=True)
T0, R = time.time(), dict(argv=sys.argv, errors={}, step_ms={}, e2e={})
def save(): json.dump(R, open(f'{OUT}/int8_step_gpu.json', 'w'), indent=1, default=str)
def log(*a): print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)

OPT = dict(pdl=False, cfg=None, fcfg=None)
def launch(x2, weight, scale, bias, out, block_n, block_k, num_warps, num_stages=1,
           norm_weight=None, eps=0.0, residual=None, res_out=None, swiglu=False):
    "GV._launch_gemv with the variant's PDL choice and tiles for int8 weights."
    int8 = scale is not None
    if int8 and norm_weight is None and not swiglu and OPT['cfg']: block_n, block_k, num_warps = OPT['cfg']
    if (norm_weight is not None or swiglu) and OPT['fcfg']: block_n, block_k, num_warps = OPT['fcfg']
    (M, K), N = x2.shape, out.shape[1]
    GV._gemv_kernel[(M, triton.cdiv(N, block_n))](
        x2, weight, weight if scale is None else scale, weight if bias is None else bias, out, x2 if residual is None else residual,
        x2 if norm_weight is None else norm_weight, x2 if res_out is None else res_out, M, N, x2.stride(0), weight.stride(0),
        out.stride(0), eps, K=K, INT8=int8, HAS_BIAS=bias is not None, EVEN_K=K % block_k == 0, NORM=norm_weight is not None,
        HAS_RES=residual is not None, SWIGLU=swiglu, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=num_warps, num_stages=num_stages,
        **(pdl_options(x2) if not int8 or OPT['pdl'] else dict(PDL=False)))
GV._launch_gemv = Q._launch_gemv = launch

def apply(llm, pdl=False, wide=False, cfg=None, head=False, fused=False, fcfg=None, gemv_head=False):
    "Set the switches on `llm`'s model (int8 or bf16)."
    m = llm.model
    OPT.update(pdl=pdl, cfg=cfg, fcfg=fcfg)
    Q._WIDE_N = 10**9 if wide else 16384; Q.pick_config.cache_clear()
    GV.FUSED_LAYER_MAX_HIDDEN = 1 << 20 if fused else 2048
    GV.use_fused_kernels(m)
    if head and not isinstance(m.lm_head, Q.QuantLinear):
        m._bf16_head = m.lm_head; m.lm_head = Q.QuantLinear.from_linear(m.lm_head)
    if not head and isinstance(m.lm_head, Q.QuantLinear): m.lm_head = m._bf16_head
    vars(m).pop('logits', None)
    if head: m.logits = lambda h: m.lm_head(h)
    elif gemv_head: m.logits = lambda h: GV.gemv(h, m.lm_head.weight) if h.shape[0] == 1 else m.lm_head(h)

def step_ms(llm, n=100):
    "ms per replay of a freshly captured batch-1 decode graph."
    r = llm.runner
    G = DecodeGraphs(r, 1, r.graphs.tables.shape[1])
    g = G.graphs[1]
    for _ in range(5): g.replay()
    torch.cuda.synchronize(); t0 = time.perf_counter()
    for _ in range(n): g.replay()
    torch.cuda.synchronize(); dt = (time.perf_counter() - t0) / n * 1e3
    del G, g; torch.cuda.empty_cache()
    return dt

def regraph(llm):
    "Capture the engine's decode and prefill graphs again (after a switch)."
    r, c = llm.runner, llm.config
    r.graphs = r.prefill_graphs = None; gc.collect(); torch.cuda.empty_cache()
    w = math.ceil(llm.max_model_len / c.block_size)
    r.graphs = DecodeGraphs(r, c.max_num_seqs, w)
    r.prefill_graphs = PrefillGraphs(r, c.max_num_batched_tokens, w, pool=r.graphs.pool)

PS = [torch.randint(0, 151643, (256,), generator=torch.Generator().manual_seed(2)).tolist()]
SP = SamplingParams(temperature=0, max_tokens=128, ignore_eos=True)
def e2e(llm):
    "tokens/s, 256-token prompt -> 128 tokens, median of 3 (the engine's graphs captured again first)."
    regraph(llm)
    first = llm.generate(PS, SamplingParams(temperature=0, max_tokens=8, ignore_eos=True), use_tqdm=False)[0].outputs[0].token_ids
    dts = []
    for _ in range(3):
        torch.cuda.synchronize(); t0 = time.perf_counter()
        out = llm.generate(PS, SP, use_tqdm=False)
        torch.cuda.synchronize(); dts.append(time.perf_counter() - t0)
    return dict(tok_s=128 / statistics.median(dts), ms_per_token=statistics.median(dts) / 128 * 1e3, times=dts,
                tokens=out[0].outputs[0].token_ids[:16], first8=first)

def run_variants(llm, kind, variants):
    res = R['step_ms'].setdefault(kind, {})
    for label, kw in variants:
        try:
            apply(llm, **kw); res[label] = step_ms(llm)
            log(f"{kind:5} {label:32} {res[label]:.3f} ms")
        except Exception:
            R['errors'][f'{kind} {label}'] = traceback.format_exc(); log('FAILED', kind, label); print(traceback.format_exc())
        save()
    return res

def run_e2e(llm, kind, label, kw, post=None):
    try:
        apply(llm, **kw)
        if post: post()
        R['e2e'][f'{kind} {label}'] = r = e2e(llm)
        log(f"e2e {kind:5} {label:32} {r['tok_s']:.1f} tok/s ({r['ms_per_token']:.3f} ms/token)")
    except Exception:
        R['errors'][f'e2e {kind} {label}'] = traceback.format_exc(); log('FAILED e2e', kind, label); print(traceback.format_exc())
    save()

@triton.jit
def _prefetch_kernel(p, n, dummy, BLOCK: tl.constexpr):
    "Read BLOCK bytes into L2 (kept: evict_last); the store never happens but keeps the loads."
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    s = tl.sum(tl.load(p + offs, mask=offs < n, other=0, eviction_policy='evict_last').to(tl.int32), 0)
    tl.store(dummy, s, mask=s == -2147483647)

DUMMY, SIDE = {}, {}
def prefetch(t, block=16384):
    b = t.view(torch.int8).reshape(-1)
    d = DUMMY.setdefault(t.device, torch.zeros(1, dtype=torch.int32, device=t.device))
    _prefetch_kernel[(triton.cdiv(b.numel(), block),)](b, b.numel(), d, BLOCK=block, num_warps=4)

def add_prefetch(model, which):
    "After each layer's qkv product, read `which(i)` (weights) into L2 on a side stream; the o product waits for it."
    side = SIDE.setdefault('s', torch.cuda.Stream())
    layers = model.model.layers
    for i, layer in enumerate(layers):
        sa = layer.self_attn
        ts = which(i, layers)
        def qkv_fwd(x, orig=sa.qkv_proj.forward, ts=ts):
            y = orig(x)
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for t in ts: prefetch(t)
            return y
        def o_fwd(x, orig=sa.o_proj.forward):
            torch.cuda.current_stream().wait_stream(side)
            return orig(x)
        sa.qkv_proj.forward, sa.o_proj.forward = qkv_fwd, o_fwd

def drop_prefetch(model):
    for layer in model.model.layers:
        for m in (layer.self_attn.qkv_proj, layer.self_attn.o_proj): vars(m).pop('forward', None)
    GV.use_fused_kernels(model)

PF = dict(o=lambda i, L: [L[i].self_attn.o_proj.weight],
          o_half_gu=lambda i, L: [L[i].self_attn.o_proj.weight, L[i].mlp.gate_up_proj.weight[:L[i].mlp.gate_up_proj.weight.shape[0] // 8]],
          o_next_qkv=lambda i, L: [L[i].self_attn.o_proj.weight] + ([L[i + 1].self_attn.qkv_proj.weight] if i + 1 < len(L) else []))

def run_prefetch(llm, kind, base_kw):
    res = R['step_ms'].setdefault(kind, {})
    for name, which in PF.items():
        label = f'prefetch {name}'
        try:
            apply(llm, **base_kw); add_prefetch(llm.model, which); res[label] = step_ms(llm)
            log(f"{kind:5} {label:32} {res[label]:.3f} ms")
        except Exception:
            R['errors'][f'{kind} {label}'] = traceback.format_exc(); log('FAILED', kind, label); print(traceback.format_exc())
        drop_prefetch(llm.model); save()

def chain():
    "36 layers of the four int8 products alone (distinct weights), one CUDA graph: µs per layer, per variant."
    from graph_timing import graph_us
    shapes = dict(qkv=(6144, 4096), o=(4096, 4096), gate_up=(24576, 4096), down=(4096, 12288))
    g = torch.Generator(device='cuda').manual_seed(0)
    W = [{k: (torch.randint(-127, 128, (n, kk), device='cuda', dtype=torch.int8, generator=g),
              torch.rand(n, device='cuda', dtype=torch.bfloat16) * 1e-3) for k, (n, kk) in shapes.items()} for _ in range(36)]
    X = {k: torch.randn(1, kk, device='cuda', dtype=torch.bfloat16) for k, (n, kk) in shapes.items()}
    bytes_layer = sum(n * kk for n, kk in shapes.values())
    res = R['chain'] = dict(bytes_per_layer=bytes_layer)
    for label, kw in [('plain', {}), ('pdl', dict(pdl=True)), ('plain wide', dict(wide=True)), ('pdl wide', dict(pdl=True, wide=True)),
                      ('pdl wide (8,512,4)', dict(pdl=True, wide=True, cfg=(8, 512, 4)))]:
        OPT.update(pdl=kw.get('pdl', False), cfg=kw.get('cfg'))
        Q._WIDE_N = 10**9 if kw.get('wide') else 16384; Q.pick_config.cache_clear()
        calls = [lambda w=w, k=k: Q.int8_matmul(X[k], *w[k]) for w in W for k in shapes]
        res[label] = graph_us(calls) * 4
        log(f"chain {label:24} {res[label]:.1f} µs/layer ({bytes_layer / res[label] / 1e6:.2f} TB/s)")
        save()
    del W; torch.cuda.empty_cache()

ck = random_checkpoint(**PRESETS['qwen3-8b'], dtype=torch.bfloat16, device='cuda')
log('checkpoint ready')
KW = dict(dtype='bfloat16', device='cuda', max_num_seqs=1, max_model_len=4096, num_kv_blocks=512)
BEST = dict(pdl=True, wide=True, head=True)
only = next((a.split('=', 1)[1].split(',') for a in sys.argv if a.startswith('--only=')), ['variants'])
if 'chain' in only:
    try: chain()
    except Exception: R['errors']['chain'] = traceback.format_exc(); print(traceback.format_exc())

BF16 = [('base', {}), ('fused', dict(fused=True))]
INT8 = [('base', {}), ('pdl', dict(pdl=True)), ('wide', dict(wide=True)), ('pdl wide', dict(pdl=True, wide=True)),
        ('pdl wide (4,1024,4)', dict(pdl=True, wide=True, cfg=(4, 1024, 4))),
        ('pdl wide (8,1024,4)', dict(pdl=True, wide=True, cfg=(8, 1024, 4))),
        ('pdl wide (2,4096,4)', dict(pdl=True, wide=True, cfg=(2, 4096, 4))),
        ('pdl wide (4,4096,8)', dict(pdl=True, wide=True, cfg=(4, 4096, 8))),
        ('pdl wide (8,512,4)', dict(pdl=True, wide=True, cfg=(8, 512, 4))),
        ('head', dict(head=True)), ('pdl wide head', dict(pdl=True, wide=True, head=True)),
        ('pdl head', dict(pdl=True, head=True)),
        ('fused', dict(fused=True)), ('pdl fused', dict(pdl=True, fused=True)),
        ('pdl wide fused', dict(pdl=True, wide=True, fused=True)),
        ('pdl wide fused (8,512,4)', dict(pdl=True, wide=True, fused=True, fcfg=(8, 512, 4))),
        ('pdl wide fused head', dict(pdl=True, wide=True, fused=True, head=True))]

for kind, q, variants, pf_kw in (('bf16', None, BF16, {}), ('int8', 'int8', INT8, BEST)):
    if not {'variants', 'prefetch'} & set(only): break
    llm = LLM(str(ck), quantization=q, **KW)
    llm.generate(PS, SamplingParams(temperature=0, max_tokens=8, ignore_eos=True), use_tqdm=False)
    res = run_variants(llm, kind, variants if 'variants' in only else [v for v in variants if v[0] in ('base', 'pdl wide head')])
    if 'prefetch' in only: run_prefetch(llm, kind, pf_kw)
    run_e2e(llm, kind, 'base', {})
    best = min(res, key=res.get)
    if best != 'base':
        kw = dict(variants).get(best) or pf_kw
        if best.startswith('prefetch'):
            run_e2e(llm, kind, best, pf_kw, post=lambda: add_prefetch(llm.model, PF[best.split()[1]])); drop_prefetch(llm.model)
        else: run_e2e(llm, kind, best, kw)
    del llm; gc.collect(); torch.cuda.empty_cache()

b = R['e2e'].get('bf16 base', {}).get('tok_s')
print('\n| engine | variant | step ms | tok/s | vs bf16 base |\n|---|---|---|---|---|')
for k, r in R['e2e'].items():
    kind, label = k.split(' ', 1)
    print(f"| {kind} | {label} | {R['step_ms'][kind].get(label, float('nan')):.3f} | {r['tok_s']:.1f} | {r['tok_s'] / b if b else float('nan'):.2f}x |")
log('done; errors in:', list(R['errors']) or 'none')
