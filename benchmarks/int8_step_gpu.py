#!/usr/bin/env python3
"""Qwen3-8B batch-1 decode step, bf16 and int8 engines: graph replay time of one decode step (at position 320) and
end-to-end tokens/s, for the engines as they are and with a choice undone, and the int8 products alone.

Run from the repository root:  PYTHONPATH=.:benchmarks python3 benchmarks/int8_step_gpu.py [--only=variants,chain,prefetch,convert]
Sections:
  variants  the engines' step and tokens/s, and as they were before (the new K/V stored by store_kv instead of
            the decode kernel: one attention launch a layer more); int8 with SiLU * up in the gate_up GEMV's epilogue
  chain     36 layers of the four int8 products alone, one CUDA graph: µs per layer against the bytes they read,
            with and without PDL, and with the tensor-core kernel instead of the GEMV for the wide product
  prefetch  each layer's o weights (and more) read into L2 on a side stream during attention
  convert   the int8 GEMV's weight conversion (magic-number fp32, int-to-float, bf16 products, and int-to-float
            without the multiply), as product chains: how much of a product's time is arithmetic
Every switch is a public one: the runner's `store`, `minillm.kernels.gemv.fused_gemv`, `int8_matmul`'s `config`,
`minillm.kernels.attention.pdl`. (The sweeps of the int8 GEMV's tiles and of its chunks before the PDL wait, and the
ablations of 13_int8's table patched the launcher: they are this script as of commit 1ef0aff, `--only=variants,pre,tiles`.)
Writes int8_step_gpu.json to $OUT if set, else to benchmarks/results/.
"""
import gc, sys, time, types, traceback, statistics
import torch
import triton
import triton.language as tl
import minillm.quant as Q
import minillm.kernels.gemv as GV
import minillm.kernels.attention as A
from minillm import LLM, SamplingParams
from minillm.loading import random_checkpoint, PRESETS
from minillm.scheduler import Sequence
from minillm.cuda_graphs import capture_graph, graphs_plugin
from helpers.graph_timing import graph_us      # benchmarks/helpers/graph_timing.py

from helpers.bench_io import log, saver, run_section     # benchmarks/helpers/bench_io.py
from helpers.int8_products import SHAPES, int8_layers

R = dict(argv=sys.argv, errors={}, step_ms={}, e2e={})
save = saver(R, 'int8_step_gpu')

def apply(llm, swiglu=False, store=True):
    "Set the switches on `llm`'s model; the defaults are the engine as it is."
    llm.engine.runner.store = None if store else A.store_kv   # the new K/V: by the decode kernel, or store_kv
    for layer in llm.engine.model.model.layers:
        vars(layer.mlp).pop('forward', None)
        if swiglu: layer.mlp.forward = types.MethodType(_mlp_swiglu, layer.mlp)

def _mlp_swiglu(self, x):
    "The MLP with gate_up and SiLU * up in one GEMV launch for one row."
    if x.numel() != x.shape[-1]: return type(self).forward(self, x)
    p = self.gate_up_proj
    return self.down_proj(GV.fused_gemv(x, p.weight, p.bias, getattr(p, 'scale', None), swiglu=True))

def step_ms(llm, n=100, blocks=3, ctx=320):
    "ms per replay of a freshly captured batch-1 decode graph at position `ctx` (blocks of its own): the median of `blocks` runs of `n` replays."
    eng = llm.engine
    r, bm, G = eng.runner, eng.block_manager, eng.runner.graphs
    seq = Sequence('step_ms', list(range(1000, 1001 + ctx)), SP)
    assert bm.allocate(seq.seq_id, seq.token_ids, ctx + 1), 'no KV blocks left'   # no prefix-cache hit
    seq.num_computed = ctx                                   # one new token, at position ctx
    batch = r.pack([(seq, 1)], bm)                           # where graph ('decode', 1) reads it
    assert batch.padded and batch.kind == 'decode'
    G.tables[:1, :batch.block_tables.shape[1]] = batch.block_tables   # as `GraphBank.replay` does
    g = capture_graph(lambda: r.forward(G.static[G.key('decode', 1)]), G.pool)[0]   # the engine's step, recaptured
    for _ in range(5): g.replay()
    dts = []
    for _ in range(blocks):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n): g.replay()
        torch.cuda.synchronize()
        dts.append((time.perf_counter() - t0) / n * 1e3)
    del g
    torch.cuda.empty_cache()
    bm.free(seq.seq_id)
    return statistics.median(dts)

def regraph(llm):
    "Capture the engine's decode and prefill graphs again (after a switch), as the CUDA graphs plugin does."
    eng = llm.engine
    eng.runner.graphs = None
    gc.collect()
    torch.cuda.empty_cache()
    graphs_plugin(eng)                                       # a new GraphBank, and a new OverlapStep

PS = [torch.randint(0, 151643, (256,), generator=torch.Generator().manual_seed(2)).tolist()]
SP = SamplingParams(temperature=0, max_tokens=128, ignore_eos=True)
def e2e(llm):
    "tokens/s, 256-token prompt -> 128 tokens, median of 3 (the engine's graphs captured again first)."
    regraph(llm)
    first = llm.generate(PS, SamplingParams(temperature=0, max_tokens=8, ignore_eos=True), use_tqdm=False)[0].outputs[0].token_ids
    dts = []
    for _ in range(3):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = llm.generate(PS, SP, use_tqdm=False)
        torch.cuda.synchronize()
        dts.append(time.perf_counter() - t0)
    one = []
    for _ in range(3):                                     # the prompt and one token: the prefill's share of the time
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        llm.generate(PS, SamplingParams(temperature=0, max_tokens=1, ignore_eos=True), use_tqdm=False)
        torch.cuda.synchronize()
        one.append(time.perf_counter() - t0)
    return dict(tok_s=128 / statistics.median(dts), ms_per_token=statistics.median(dts) / 128 * 1e3, times=dts,
                first_token_ms=statistics.median(one) * 1e3, tokens=out[0].outputs[0].token_ids[:16], first8=first)

def run_variants(llm, kind, variants):
    res = R['step_ms'].setdefault(kind, {})
    for label, kw in variants:
        try:
            apply(llm, **kw)
            res[label] = step_ms(llm)
            log(f"{kind:5} {label:32} {res[label]:.3f} ms")
        except Exception:
            R['errors'][f'{kind} {label}'] = traceback.format_exc()
            log('FAILED', kind, label)
            print(traceback.format_exc())
        save()
    return res

def run_e2e(llm, kind, label, kw, post=None):
    try:
        apply(llm, **kw)
        if post: post()
        R['e2e'][f'{kind} {label}'] = r = e2e(llm)
        log(f"e2e {kind:5} {label:32} {r['tok_s']:.1f} tok/s ({r['ms_per_token']:.3f} ms/token, first token {r['first_token_ms']:.1f} ms)")
    except Exception:
        R['errors'][f'e2e {kind} {label}'] = traceback.format_exc()
        log('FAILED e2e', kind, label)
        print(traceback.format_exc())
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
            apply(llm, **base_kw)
            add_prefetch(llm.engine.model, which)
            res[label] = step_ms(llm)
            log(f"{kind:5} {label:32} {res[label]:.3f} ms")
        except Exception:
            R['errors'][f'{kind} {label}'] = traceback.format_exc()
            log('FAILED', kind, label)
            print(traceback.format_exc())
        drop_prefetch(llm.engine.model)
        save()

TC_WIDE = (16, 64, 256, 4, 3)        # the tensor-core kernel's tile for one row of a wide product (N >= 16,384)

def chain():
    "36 layers of the four int8 products alone (distinct weights), one CUDA graph: µs per layer, per variant."
    W, X, _ = int8_layers()
    bytes_layer = sum(n * kk for n, kk in SHAPES.values())
    res = R['chain'] = dict(bytes_per_layer=bytes_layer)
    for label, pdl, tc_wide in [('engine', True, False), ('no pdl', False, False), ('tensor-core wide', True, True),
                                ('no pdl, tensor-core wide', False, True)]:
        cfg = lambda k: TC_WIDE if tc_wide and SHAPES[k][0] >= 16384 else None     # None: the engine's table
        calls = [lambda w=w, k=k: Q.int8_matmul(X[k], *w[k], config=cfg(k)) for w in W for k in SHAPES]
        with A.pdl(pdl): res[label] = graph_us(calls) * 4
        log(f"chain {label:24} {res[label]:.1f} µs/layer ({bytes_layer / res[label] / 1e6:.2f} TB/s)")
        save()
    del W
    torch.cuda.empty_cache()

from minillm.kernels.attention import gdc_launch_dependents, gdc_wait

@triton.jit
def _convert_kernel(x_ptr, w_ptr, s_ptr, o_ptr, K: tl.constexpr, MODE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    "One-row int8 GEMV, the engine's tile and PDL; MODE 0 magic-number fp32 (the engine's), 1 int-to-float, 2 bf16 products, 3 ('load only') int-to-float without the multiply."
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    w_ptrs = w_ptr + rn[:, None].to(tl.int64) * K + rk[None, :]
    gdc_launch_dependents()
    w0 = tl.load(w_ptrs, eviction_policy='evict_first')
    gdc_wait()
    acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    for k0 in tl.static_range(0, K, BLOCK_K):
        if k0 == 0: w = w0
        else: w = tl.load(w_ptrs + k0, eviction_policy='evict_first')
        x = tl.load(x_ptr + k0 + rk)
        if MODE == 0: acc += ((w.to(tl.int32) + 0x4B000080).to(tl.float32, bitcast=True) - 8388736.0) * x.to(tl.float32)[None, :]
        elif MODE == 1: acc += w.to(tl.float32) * x.to(tl.float32)[None, :]
        elif MODE == 2: acc += (w.to(tl.bfloat16) * x[None, :]).to(tl.float32)
        else: acc += w.to(tl.float32)
    y = tl.sum(acc, 1) * tl.load(s_ptr + rn).to(tl.float32)
    tl.store(o_ptr + rn, y.to(o_ptr.dtype.element_ty))

def convert():
    "The four products of 36 layers as one graph, for each conversion MODE: µs per layer (and the error of MODE 2)."
    W, X, O = int8_layers()
    bn, bk, nw = GV.GEMV_INT8_CONFIG
    def run(w, k, mode):
        n, kk = SHAPES[k]
        _convert_kernel[(n // bn,)](X[k], w[k][0], w[k][1], O[k], K=kk, MODE=mode, BLOCK_N=bn, BLOCK_K=bk, num_warps=nw, launch_pdl=True)
    res = R['convert'] = {}
    for mode, label in enumerate(('magic fp32 (engine)', 'int-to-float', 'bf16 products', 'load only')):
        run(W[0], 'qkv', mode)
        ref = (X['qkv'].double() @ W[0]['qkv'][0].double().T) * W[0]['qkv'][1].double()
        err = ((O['qkv'].double() - ref).norm() / ref.norm()).item()
        res[label] = dict(us_per_layer=graph_us([lambda w=w, k=k, m=mode: run(w, k, m) for w in W for k in SHAPES]) * 4, rel_err=err)
        log(f"convert {label:22} {res[label]['us_per_layer']:.1f} µs/layer, rel. error {err:.1e}")
    del W
    torch.cuda.empty_cache()

ck = random_checkpoint(**PRESETS['qwen3-8b'], dtype=torch.bfloat16, device='cuda')
log('checkpoint ready')
KW = dict(dtype='bfloat16', device='cuda', max_num_seqs=1, max_model_len=4096, num_kv_blocks=512)
only = next((a.split('=', 1)[1].split(',') for a in sys.argv if a.startswith('--only=')), ['variants'])
for fn in (chain, convert):
    if fn.__name__ in only: run_section(fn, R, save)

INT8 = [('engine', {}), ('before', dict(store=False)), ('swiglu', dict(swiglu=True))]
BF16 = [('engine', {}), ('before', dict(store=False))]
for kind, q, variants in (('bf16', None, BF16), ('int8', 'int8', INT8)):
    if not {'variants', 'prefetch'} & set(only): break
    llm = LLM(str(ck), quantization=q, **KW)
    llm.generate(PS, SamplingParams(temperature=0, max_tokens=8, ignore_eos=True), use_tqdm=False)
    res = run_variants(llm, kind, variants if 'variants' in only else variants[:1])
    if 'prefetch' in only: run_prefetch(llm, kind, {})
    run_e2e(llm, kind, 'engine', {})
    if 'variants' in only:
        run_e2e(llm, kind, 'before', dict(variants)['before'])
        best = min(res, key=res.get)
        if best not in ('engine', 'before'): run_e2e(llm, kind, best, dict(variants)[best])
    apply(llm)
    del llm
    gc.collect()
    torch.cuda.empty_cache()

b = R['e2e'].get('bf16 engine', {}).get('tok_s')
print('\n| engine | variant | step ms | tok/s | vs bf16 engine |\n|---|---|---|---|---|')
for k, r in R['e2e'].items():
    kind, label = k.split(' ', 1)
    print(f"| {kind} | {label} | {R['step_ms'][kind].get(label, float('nan')):.3f} | {r['tok_s']:.1f} | {r['tok_s'] / b if b else float('nan'):.2f}x |")
log('done; errors in:', list(R['errors']) or 'none')
