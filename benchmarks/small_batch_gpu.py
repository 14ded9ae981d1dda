#!/usr/bin/env python3
"""A decode step of 1 to 8 sequences on Qwen3-0.6B (or `--preset`), bf16. First the engine end to end at batch 1
to 8 (256-token prompts, 128 new tokens, greedy; the median of three runs each) in the builds of `BUILDS`: for
Qwen3-0.6B the fused decoder layer for one row (before) and for up to two (now), `linear`'s several-row GEMV for up
to 4 rows only, 2 rows of the narrow weights by the several-row GEMV (`GEMV_PER_ROW_MAX_N`), the fused layer for up
to 8 rows by the one-row kernel over the rows or by the several-row kernel (`FUSED_ROWS`), and the first build
again; for other models the fused layer at their width (the engine's tiles and three taller ones) at batch 1 and 2.
Then a layer's four products at 1 to 8 rows: cuBLAS (`F.linear`), the one-row GEMV launched over the rows
(`fused_gemv`: a program per row and output block) and the several-row GEMV (the engine's tiles and nine others); for
qkv and gate_up also with the norm, residual and SwiGLU folded in (`fused_gemv`), a program per row against the
several-row kernel's tiles. Each product is checked against float64, then timed as the model's layers of distinct
weights replayed from one CUDA graph.

Run from the repository root:
  PYTHONPATH=.:benchmarks python3 benchmarks/small_batch_gpu.py [--preset=qwen3-8b] [--only=e2e|products]
      [--tiles] [--smoke]
--tiles runs the end-to-end builds of taller GEMV tiles instead (below, `TILES_E2E`), at batch 1 and 2.
--smoke runs tiny shapes on the CPU (Triton's interpreter), to check the script. Writes
small_batch_gpu_<preset>.json (with --tiles, small_batch_gpu_tiles_<preset>.json) to $OUT if set, else to
benchmarks/results/.
"""
import sys, time, statistics, gc, contextlib
import torch
import torch.nn.functional as F
import minillm.kernels.gemv as G
from minillm.kernels.gemv import gemv, fused_gemv
from minillm.loading import PRESETS
from helpers.graph_timing import graph_us                       # benchmarks/helpers/graph_timing.py
from helpers.bench_io import log, saver, run_section

SMOKE = '--smoke' in sys.argv
PRESET = next((a[9:] for a in sys.argv[1:] if a.startswith('--preset=')), 'qwen3-0.6b')
C = PRESETS[PRESET]
H, I, D = C['hidden_size'], C['intermediate_size'], C['head_dim']
DEV, LAYERS, MS = ('cpu', 2, [2]) if SMOKE else ('cuda', C['num_hidden_layers'], [1, 2, 4, 8])
SHAPES = (dict(qkv=(96, 64)) if SMOKE else                                                  # (N, K)
          dict(qkv=((C['num_attention_heads'] + 2 * C['num_key_value_heads']) * D, H),
               o=(H, C['num_attention_heads'] * D), gate_up=(2 * I, H), down=(H, I)))
FUSED = ('qkv',) if SMOKE else ('qkv', 'gate_up')               # the products `decode_layer` folds a norm into
# the several-row GEMV's (BLOCK_N, BLOCK_K, num_warps): the engine's is tuned at 2 to 5 rows
ROWS_CONFIGS = ([(4, 64, 4), (8, 64, 4)] if SMOKE else
                [(4, 512, 4), (4, 256, 4), (4, 128, 4), (8, 256, 4), (8, 128, 4), (16, 128, 4), (8, 256, 8),
                 (16, 64, 4), (2, 512, 4), (2, 256, 2)])
R = dict(argv=sys.argv, errors={}, products={}, e2e={})
save = saver(R, f"small_batch_gpu_{'tiles_' if '--tiles' in sys.argv else ''}{PRESET}")

def rel(a, b): return ((a.double() - b).norm() / b.norm()).item()

def fused_ref(x, r, g, w, swiglu, eps=1e-6):
    "`fused_gemv`'s norm (of `x + r`, by `g`), product and SwiGLU in float64."
    h = x.double() + r.double()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * g.double()
    y = h @ w.double().T
    if swiglu: y = F.silu(y[:, :y.shape[1] // 2]) * y[:, y.shape[1] // 2:]
    return y

def timed(f, ws, out, ref):
    "µs per call of `f(w)` over the layers' weights `ws`, once its first output checks out; else what went wrong."
    try:
        out.fill_(float('nan'))
        out.copy_(f(ws[0]))
        e = rel(out, ref)
        if not (e < 1e-2 and bool(out.isfinite().all())): return dict(err=e)
        return dict(err=e, us=graph_us([lambda w=w: f(w) for w in ws]))
    except Exception as ex: return dict(error=f"{type(ex).__name__}: {str(ex)[:300]}")

def products():
    g = torch.Generator(DEV).manual_seed(0)
    W = {name: [(torch.randn(n, k, device=DEV, generator=g) * k ** -0.5).to(torch.bfloat16) for _ in range(LAYERS)]
         for name, (n, k) in SHAPES.items()}
    for M in MS:
        R['products'][M] = res = {}
        for name, (N, K) in SHAPES.items():
            x = torch.randn(M, K, device=DEV, generator=g).to(torch.bfloat16)
            out, ws = torch.empty(M, N, device=DEV, dtype=torch.bfloat16), W[name]
            ref = x.double() @ ws[0].double().T
            r = res[name] = dict(cublas=timed(lambda w: F.linear(x, w), ws, out, ref),
                                 gemv_per_row=timed(lambda w: per_row(x, w), ws, out, ref),
                                 gemv_rows=timed(lambda w: several(x, w), ws, out, ref))
            rows = {str(c): timed(lambda w, c=c: several(x, w, c), ws, out, ref) for c in ROWS_CONFIGS}
            ok = {c: v['us'] for c, v in rows.items() if v.get('us')}
            r['gemv_rows_configs'] = rows
            if ok: r['gemv_rows_best'], r['gemv_rows_best_us'] = min(ok, key=ok.get), min(ok.values())
            if M > 1 and name in FUSED:                      # with the norm (and SwiGLU) folded in
                sw, r_, g_ = name == 'gate_up', torch.randn_like(x), torch.randn(K, device=DEV).to(x.dtype)
                fo = torch.empty(M, N // 2 if sw else N, device=DEV, dtype=torch.bfloat16)
                fref = fused_ref(x, r_, g_, ws[0], sw)
                r['fused_rows_configs'] = {str(c): timed(
                    lambda w, c=c: fused_gemv(x, w, None, None, g_, 1e-6, r_, sw, config=c)[0], ws, fo, fref)
                    for c in ROWS_CONFIGS}
                r['fused_per_row'] = timed(lambda w: per_row(x, w, None, None, g_, 1e-6, r_, sw)[0], ws, fo, fref)
                ok = {c: v['us'] for c, v in r['fused_rows_configs'].items() if v.get('us')}
                log(f"M={M} {name:8} fused: per row {r['fused_per_row'].get('us', float('nan')):6.1f}  several-row "
                    + '  '.join(f"{c} {v:.1f}" for c, v in sorted(ok.items(), key=lambda kv: kv[1])[:3]))
            us = lambda k: r[k].get('us', float('nan'))
            log(f"M={M} {name:8} cuBLAS {us('cublas'):6.1f}  GEMV per row {us('gemv_per_row'):6.1f}  "
                f"several-row GEMV {us('gemv_rows'):6.1f} (best {r.get('gemv_rows_best_us', float('nan')):6.1f} "
                f"{r.get('gemv_rows_best')})")
            save()
        tot = {k: sum(res[n][k].get('us', float('nan')) for n in SHAPES)
               for k in ('cublas', 'gemv_per_row', 'gemv_rows')}
        tot['gemv_rows_best'] = sum(res[n].get('gemv_rows_best_us', float('nan')) for n in SHAPES)
        R['products'][M]['sum'] = tot
        log(f"M={M} a layer's four products, µs: " + '  '.join(f"{k} {v:.1f}" for k, v in tot.items()))

@contextlib.contextmanager
def switched(**consts):
    "The GEMV chapter's constants set to `consts` inside the block, and back to what they were after it."
    before = {k: getattr(G, k) for k in consts}
    for k, v in consts.items(): setattr(G, k, v)
    try: yield
    finally:
        for k, v in before.items(): setattr(G, k, v)

def per_row(x, w, *args):
    "The one-row GEMV launched over the rows (`fused_gemv(x, w, *args)` with `FUSED_ROWS` off)."
    with switched(FUSED_ROWS=False): return fused_gemv(x, w, *args)

def several(x, w, config=None):
    "The several-row GEMV, also where `gemv` would take 2 rows per row (`GEMV_PER_ROW_MAX_N`)."
    with switched(GEMV_PER_ROW_MAX_N=0): return gemv(x, w, config=config)

# the engine's routes for 2 to 8 rows: the fused layer for one row (before), for up to two (now), before `linear`
# sent 5 to 8 rows to the several-row GEMV, 2 rows of o and down by the several-row GEMV, the fused layer for up to
# 8 rows by the one-row kernel over the rows or by the several-row kernel; last 'before' again, for the spread
BUILDS = {'before': dict(FUSED_LAYER_MAX_ROWS=1),
          'now': {},
          'GEMV to 4 rows': dict(FUSED_LAYER_MAX_ROWS=1, GEMV_MAX_ROWS=4),
          'two rows: several-row GEMV': dict(GEMV_PER_ROW_MAX_N=0),
          'fused layer, per row': dict(FUSED_LAYER_MAX_ROWS=8, FUSED_ROWS=False),
          'fused layer, rows': dict(FUSED_LAYER_MAX_ROWS=8),
          'before, again': dict(FUSED_LAYER_MAX_ROWS=1)}
# other models: the fused decoder layer at their width too (`decode_layer` stops at `FUSED_LAYER_MAX_HIDDEN`)
# (at batch 1 and 2 only, where `decode_layer` applies), with the engine's tiles and taller ones: at 4,096 wide
# every program of the fused products reads the whole activation row twice, and taller tiles mean fewer programs
if PRESET != 'qwen3-0.6b':
    BUILDS = {'before': {}, 'fused layer': dict(FUSED_LAYER_MAX_HIDDEN=H),
              **{f'fused layer, tiles {c}': dict(FUSED_LAYER_MAX_HIDDEN=H, FUSED_GEMV_CONFIG=c)
                 for c in [(8, 512, 4), (16, 512, 8), (8, 1024, 8)]},
              'before, again': {}}
BATCHES = (1, 2, 4, 8) if PRESET == 'qwen3-0.6b' else (1, 2)
# --tiles: the GEMVs' tiles at batch 1 and 2 instead, taller ones with fewer programs, so that every program of a
# product is on the GPU (and has its weights in flight) while the kernel before it runs; with all of o's and down's
# chunks loaded before the PDL wait (GEMV_PRE)
TILES_E2E = '--tiles' in sys.argv
if TILES_E2E:
    tall = dict(FUSED_GEMV_CONFIG=(16, 512, 8), GEMV_CONFIG=(8, 1024, 8), GEMV_PRE=(4, 4))
    BUILDS = {'now': {}, 'all of down before the wait': dict(GEMV_PRE=(4, 4)),
              **{f'fused {c}': dict(FUSED_GEMV_CONFIG=c) for c in [(8, 512, 4), (16, 512, 8)]},
              **{f'GEMV {c}, all before the wait': dict(GEMV_CONFIG=c, GEMV_PRE=(4, 4))
                 for c in [(4, 1024, 4), (8, 1024, 8), (8, 512, 4)]},
              'fused (16, 512, 8), GEMV (8, 1024, 8), all before': tall, 'now, again': {}}
    BATCHES = (1, 2)

def e2e(builds):
    from minillm import LLM, SamplingParams
    from minillm.loading import random_checkpoint
    ck = random_checkpoint(**C, dtype=torch.bfloat16, device='cuda')
    prompts = torch.randint(0, 151643, (8, 256), generator=torch.Generator().manual_seed(0)).tolist()
    sp = SamplingParams(temperature=0, max_tokens=128, ignore_eos=True)
    for build, consts in builds.items():
        with switched(**consts):                              # read when the engine captures its graphs
            llm = LLM(str(ck), dtype='bfloat16', device='cuda', enable_prefix_caching=False)
            for B in BATCHES:
                llm.generate(prompts[:B], sp, use_tqdm=False)                # warm-up
                ts = []
                for _ in range(3):
                    torch.cuda.synchronize()
                    t = time.perf_counter()
                    outs = llm.generate(prompts[:B], sp, use_tqdm=False)
                    torch.cuda.synchronize()
                    ts.append(time.perf_counter() - t)
                r = R['e2e'][f'{build} B={B}'] = dict(tok_s=B * 128 / statistics.median(ts), seconds=ts,
                                                     consts={k: list(v) if isinstance(v, tuple) else v
                                                             for k, v in consts.items()},
                                                     first_tokens=[o.outputs[0].token_ids[:16] for o in outs])
                log(f"{build:24} batch {B}: {r['tok_s']:8.0f} tokens/s")
                save()
            del llm
            gc.collect()
            torch.cuda.empty_cache()
    first = next(iter(builds))
    for B in BATCHES:
        a = R['e2e'][f'{first} B={B}']
        for build in list(builds)[1:]:
            b = R['e2e'][f'{build} B={B}']
            log(f"batch {B}: {build} {b['tok_s'] / a['tok_s']:.2f}x {first}; same first 16 tokens in "
                f"{sum(x == y for x, y in zip(a['first_tokens'], b['first_tokens']))}/{B} sequences")

ONLY = next((a[7:] for a in sys.argv[1:] if a.startswith('--only=')), 'e2e,products').split(',')
if set(ONLY) - {'e2e', 'products'}: sys.exit(f"--only takes e2e and/or products (comma-separated), got {ONLY}")
if 'e2e' in ONLY and not SMOKE: run_section(lambda: e2e(BUILDS), R, save, 'e2e')
if 'products' in ONLY: run_section(products, R, save)
log('done')
