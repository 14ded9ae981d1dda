#!/usr/bin/env python3
"""Checks and times the GEMV with RMSNorm folded into its prologue and SwiGLU into its epilogue (minillm.kernels.gemv.
fused_gemv) and the fused single-row decoder layer (decode_layer), against the unfused chains they replace.

Run from the repository root:  PYTHONPATH=.:benchmarks python3 benchmarks/fused_layer_gpu.py [--tiny] [--only=check,ops,layer]
  check  bf16 correctness at Qwen3-0.6B and Qwen3-8B shapes (hidden 1024/4096, qkv 4096/6144, intermediate
         3072/12288), dense and int8: fused vs the unfused Triton chain (new residual bit-identical, outputs within a
         rounding step, share of bit-identical outputs), and both vs the PyTorch reference layers
  ops    µs per call inside CUDA graphs, replayed over enough weight copies to defeat the 60 MB L2:
         norm+qkv: rms_norm + GEMV vs NORM;  swiglu: GEMV + silu_mul vs SWIGLU;  norm+gate_up+swiglu: all three vs
         NORM+SWIGLU; over candidate (BLOCK_N, BLOCK_K, num_warps). The unfused int8 chain uses minillm.quant.int8_matmul.
  layer  µs per DecoderLayer (attention replaced by a no-op) with and without decode_layer, dense and int8
--tiny   tiny shapes, on CPU under TRITON_INTERPRET=1 when there is no GPU (a smoke test: timings are meaningless)
Writes fused_layer_gpu.json to $OUT if set, else to benchmarks/results/. Needs torch and triton only (no nbdev/transformers).
"""
import os, sys, math, types, traceback
import torch
TINY = '--tiny' in sys.argv
CUDA = torch.cuda.is_available()
if not CUDA: os.environ.setdefault('TRITON_INTERPRET', '1')
import torch.nn as nn
import torch.nn.functional as F
import minillm.kernels.fused as FK
import minillm.kernels.gemv as GV
import minillm.quant as Q
from minillm.config import ModelConfig
from minillm.layers import RMSNorm, RotaryEmbedding
from minillm.model import DecoderLayer
from helpers.bench_io import log, saver        # benchmarks/helpers/bench_io.py

ONLY = next((a.split('=', 1)[1].split(',') for a in sys.argv if a.startswith('--only=')), ['check', 'ops', 'layer'])
DEV, DT, EPS, L2 = ('cuda' if CUDA else 'cpu'), torch.bfloat16, 1e-6, 60 * 2**20
R = dict(argv=sys.argv, torch=torch.__version__, triton=__import__('triton').__version__,
         device=torch.cuda.get_device_name() if CUDA else 'cpu (interpreter)', errors={})
save = saver(R, 'fused_layer_gpu')

if TINY:
    SHAPES = {'tiny': dict(K=64, qkv=96, I=48, cfg=dict(hidden_size=64, intermediate_size=48, num_attention_heads=4,
                                                         num_key_value_heads=2, head_dim=16))}
    CONFIGS, MAX_COPIES = [(2, 32, 4), (4, 64, 4)], 2
else:
    SHAPES = {'0.6b': dict(K=1024, qkv=4096, I=3072, cfg=dict(hidden_size=1024, intermediate_size=3072, num_attention_heads=16,
                                                               num_key_value_heads=8, head_dim=128)),
              '8b': dict(K=4096, qkv=6144, I=12288, cfg=dict(hidden_size=4096, intermediate_size=12288, num_attention_heads=32,
                                                              num_key_value_heads=8, head_dim=128))}
    CONFIGS, MAX_COPIES = [(2, 1024, 4), (4, 1024, 4), (4, 512, 2), (4, 512, 4), (8, 512, 4), (16, 512, 8), (4, 256, 2)], 64

from helpers.graph_timing import graph_us as gtime      # benchmarks/helpers/graph_timing.py

def copies_for(nbytes): return max(2, min(MAX_COPIES, math.ceil(3 * L2 / nbytes))) if CUDA else 1

def make_weights(N, K, kind, copies):
    "`copies` weights `[(w, scale)]`: bf16 (scale None) or int8 with a bf16 row scale."
    g = torch.Generator(device=DEV).manual_seed(N + K)
    if kind == 'bf16': return [((torch.randn(N, K, device=DEV, generator=g) * 0.02).to(DT), None) for _ in range(copies)]
    return [(torch.randint(-127, 128, (N, K), device=DEV, dtype=torch.int8, generator=g),
             (torch.rand(N, device=DEV, generator=g) * 3e-4 + 1e-4).to(DT)) for _ in range(copies)]

# the unfused chains (what the layer runs without decode_layer) and the fused calls
def lin(h, w, s): return GV.gemv(h, w) if s is None else Q.int8_matmul(h, w, s)
def norm_unfused(x, r, g, w, s):
    h, rr = FK.rms_norm(x, g, EPS, r)
    return lin(h, w, s), rr
def swiglu_unfused(x, r, g, w, s): return FK.silu_mul(lin(x, w, s))
def norm_swiglu_unfused(x, r, g, w, s):
    h, rr = FK.rms_norm(x, g, EPS, r)
    return FK.silu_mul(lin(h, w, s)), rr
def norm_fused(x, r, g, w, s, c=None): return GV.fused_gemv(x, w, None, s, g, EPS, r, config=c)
def swiglu_fused(x, r, g, w, s, c=None): return GV.fused_gemv(x, w, None, s, swiglu=True, config=c)
def norm_swiglu_fused(x, r, g, w, s, c=None): return GV.fused_gemv(x, w, None, s, g, EPS, r, swiglu=True, config=c)
OPS = {'norm+qkv': ('qkv', norm_unfused, norm_fused), 'swiglu': ('gate_up', swiglu_unfused, swiglu_fused),
       'norm+gate_up+swiglu': ('gate_up', norm_swiglu_unfused, norm_swiglu_fused)}

def torch_ref(op, x, r, g, w, s):
    "The PyTorch reference layers: layers.RMSNorm (with its residual add), F.linear on the dequantised weight, F.silu * up."
    if op != 'swiglu':
        n = RMSNorm(x.shape[-1], EPS).to(DEV, DT)
        n.weight.data.copy_(g)
        x, r = n(x, r)
    y = F.linear(x, w if s is None else Q.dequantize_weight(w, s, DT))
    return y if op == 'norm+qkv' else F.silu(y[..., :y.shape[-1] // 2]) * y[..., y.shape[-1] // 2:]

def rel(a, b): return ((a.float() - b.float()).norm() / b.float().norm()).item()

def inputs(K):
    g = torch.Generator(device=DEV).manual_seed(K)
    x, r = (torch.randn(1, K, device=DEV, generator=g).to(DT) for _ in range(2))
    return x, r, (1 + 0.1 * torch.randn(K, device=DEV, generator=g)).to(DT)

@torch.no_grad()
def check():
    res = []
    for model, sh in SHAPES.items():
        x, r, g = inputs(sh['K'])
        for kind in ('bf16', 'int8'):
            for op, (mat, unf, fus) in OPS.items():
                N = sh['qkv'] if mat == 'qkv' else 2 * sh['I']
                (w, s), = make_weights(N, sh['K'], kind, 1)
                want = unf(x, r, g, w, s)
                ref = torch_ref(op, x, r, g, w, s)
                row = dict(model=model, kind=kind, op=op, N=N, K=sh['K'])
                for c in [None] + CONFIGS:
                    got = fus(x, r, g, w, s, c)
                    if op != 'swiglu':
                        assert torch.equal(got[1], want[1]), (model, kind, op, c, 'new residual differs')
                        got, wnt = got[0], want[0]
                    else: wnt = want
                    e = rel(got, wnt)
                    assert e < 1e-2, (model, kind, op, c, e)
                    row[str(c or 'default')] = dict(rel_vs_unfused=e, equal_frac=(got == wnt).float().mean().item())
                row['rel_unfused_vs_torch'] = rel(wnt, ref)
                row['rel_fused_vs_torch'] = rel(fus(x, r, g, w, s)[0] if op != 'swiglu' else fus(x, r, g, w, s), ref)
                res.append(row)
                d = row['default']
                log(f"{model:5} {kind:5} {op:20} fused vs unfused: rel {d['rel_vs_unfused']:.1e}, {100 * d['equal_frac']:5.1f}% bit-equal"
                    f" | vs torch: unfused {row['rel_unfused_vs_torch']:.1e}, fused {row['rel_fused_vs_torch']:.1e}")
                del w, s
    R['check'] = res

@torch.no_grad()
def ops():
    res = []
    for model, sh in SHAPES.items():
        x, r, g = inputs(sh['K'])
        for kind in ('bf16', 'int8'):
            for mat in ('qkv', 'gate_up'):
                N = sh['qkv'] if mat == 'qkv' else 2 * sh['I']
                ws = make_weights(N, sh['K'], kind, copies_for(N * sh['K'] * (2 if kind == 'bf16' else 1)))
                alone = gtime([lambda w=w, s=s: lin(x, w, s) for w, s in ws])       # the plain GEMV (int8: int8_matmul)
                for op, (m, unf, fus) in OPS.items():
                    if m != mat: continue
                    row = dict(model=model, kind=kind, op=op, N=N, K=sh['K'], copies=len(ws), gemv_alone=alone)
                    row['unfused'] = gtime([lambda w=w, s=s: unf(x, r, g, w, s) for w, s in ws])
                    for c in [None] + CONFIGS: row[str(c or 'default')] = gtime([lambda w=w, s=s: fus(x, r, g, w, s, c) for w, s in ws])
                    best = min(CONFIGS, key=lambda c: row[str(c)])
                    row['best'], row['best_us'] = best, row[str(best)]
                    res.append(row)
                    log(f"{model:5} {kind:5} {op:20} GEMV alone {row['gemv_alone']:6.1f}  unfused {row['unfused']:6.1f}  fused default"
                        f" {row['default']:6.1f}  best {row['best_us']:6.1f} {best}")
                del ws
                if CUDA: torch.cuda.empty_cache()
    R['ops'] = res

@torch.no_grad()
def layer():
    res = []
    for model, sh in SHAPES.items():
        cfg = ModelConfig(**sh['cfg'])
        per_layer = 2 * sh['K'] * (cfg.q_size + 2 * cfg.kv_size + 2 * sh['I']) + 2 * cfg.q_size * sh['K'] + 2 * sh['I'] * sh['K']
        n = copies_for(per_layer)
        with torch.device(DEV): layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(n)).to(DT)
        for p in layers.parameters():
            if p.ndim == 1: p.data.normal_(1, 0.1)                                     # norm weights
        rope = RotaryEmbedding(cfg.head_dim, cfg.rope_theta, 4096)
        cos, sin = rope(torch.tensor([7], device=DEV))
        x, r, _ = inputs(sh['K'])
        attn = lambda i, q, k, v: q                                                    # attention left out: it is not fused here
        def run():
            h, res_ = x, r
            for L in layers: h, res_ = L(h, res_, cos, sin, attn)
        for kind in ('bf16', 'int8'):
            if kind == 'int8': Q.quantize_model(types.SimpleNamespace(model=types.SimpleNamespace(layers=layers)))
            GV.use_fused_kernels(layers)
            fused_out = layers[0](x, r, cos, sin, attn)                                # one layer: decode_layer ...
            t_fused = gtime([run]) / n
            for L in layers: L.kernel = None
            unfused_out = layers[0](x, r, cos, sin, attn)                              # ... and as written
            t_unfused = gtime([run]) / n
            e = max(rel(a, b) for a, b in zip(fused_out, unfused_out))              # output and new residual
            if e > (1e-2 if CUDA else 3e-2): log(f"WARNING {model} {kind} layer: fused and unfused differ by {e:.1e} (relative)")
            row = dict(model=model, kind=kind, layers=n, unfused_us=t_unfused, fused_us=t_fused, rel_out=e)
            res.append(row)
            log(f"{model:5} {kind:5} layer (no attention): unfused {t_unfused:6.1f} µs  decode_layer {t_fused:6.1f} µs  (rel diff {e:.1e})")
        del layers
        if CUDA: torch.cuda.empty_cache()
    R['layer'] = res

for fn in (check, ops, layer):
    if fn.__name__ not in ONLY: continue
    log('==', fn.__name__)
    try: fn()
    except Exception:
        R['errors'][fn.__name__] = traceback.format_exc()
        log('FAILED', fn.__name__)
        print(traceback.format_exc(), flush=True)
    save()

print('\n' + f"{'shape':6} {'kind':5} {'op':20} {'unfused µs':>10} {'fused µs':>9} {'best µs':>8} {'best config':>15} {'saved µs':>8}")
for row in R.get('ops', []):
    print(f"{row['model']:6} {row['kind']:5} {row['op']:20} {row['unfused']:10.1f} {row['default']:9.1f} {row['best_us']:8.1f}"
          f" {str(row['best']):>15} {row['unfused'] - row['best_us']:8.1f}")
for row in R.get('layer', []):
    print(f"{row['model']:6} {row['kind']:5} {'layer (no attention)':20} {row['unfused_us']:10.1f} {row['fused_us']:9.1f}"
          f" {'':8} {'':>15} {row['unfused_us'] - row['fused_us']:8.1f}")
log('errors:', list(R['errors']) or 'none')
