#!/usr/bin/env python3
"""GPU checks and timings for the int8 chapter (minillm.quant) and the CUDA RMSNorm chapter (csrc/rmsnorm.cu, built by helpers/rmsnorm_cuda.py).

Run from the repository root:  PYTHONPATH=.:benchmarks python3 benchmarks/int8_rmsnorm_gpu.py [--sweep] [--smoke]
  --sweep  also time the candidate tile configurations of the int8 kernels per M (how the table in
           minillm.quant was chosen; results/int8_rmsnorm_h200_20261129_cb5e77d.json is such a run)
  --smoke  CPU dry run on tiny shapes (Triton interpreter, PyTorch RMSNorm): checks this script, measures nothing
Correctness first, then timing; a short table last. Kernel timings replay a CUDA graph of back-to-back calls
(as a decode step runs) over enough copies of the weights that they come from HBM, not L2 (triton.testing.do_bench,
median of the replays, divided by the calls per graph).
Writes int8_rmsnorm_gpu.json to the folder named by $OUT if set, else to benchmarks/results/.
"""
import os, sys, json, time, subprocess, traceback, tempfile
SMOKE, SWEEP = '--smoke' in sys.argv, '--sweep' in sys.argv
if SMOKE: os.environ['TRITON_INTERPRET'] = '1'          # before triton is imported
BUILD_LOG = os.path.join(tempfile.gettempdir(), 'minillm_rmsnorm_build.log')

builder = None
if not SMOKE:   # compile the RMSNorm extension in the background while the int8 work runs on the GPU
    builder = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), 'helpers', 'rmsnorm_cuda.py')],
                               stdout=open(BUILD_LOG, 'w'), stderr=subprocess.STDOUT)

import torch
import torch.nn.functional as F
import triton
from minillm.quant import (quantize_weight, dequantize_weight, dequantize_triton, int8_matmul, w8_linear,
                           quantize_model)
from minillm.config import ModelConfig
from minillm.model import QwenForCausalLM
from minillm.layers import RMSNorm
from helpers.bench_io import log, saver        # benchmarks/helpers/bench_io.py

DEV = 'cpu' if SMOKE else 'cuda'
R = dict(argv=sys.argv, errors={})
save = saver(R, 'int8_rmsnorm_gpu')

SECTIONS = {}
def section(fn):
    SECTIONS[fn.__name__] = fn
    return fn

def run_section(name):
    "Run one part; record (not raise) its failure so the other parts still run."
    log('==', name)
    try: SECTIONS[name]()
    except Exception:
        R['errors'][name] = traceback.format_exc()
        log('FAILED', name)
        print(traceback.format_exc())
    save()

def bench(f, warmup=10, rep=50):
    "Median µs."
    if SMOKE:
        f()
        t = time.perf_counter()
        f()
        return (time.perf_counter() - t) * 1e6
    from triton.testing import do_bench
    return do_bench(f, warmup=warmup, rep=rep, return_mode='median') * 1e3

def rel_err(a, b): return ((a.double() - b.double()).norm() / b.double().norm()).item()

L2 = 60 * 2**20
from helpers.graph_timing import graph_us as gtime      # benchmarks/helpers/graph_timing.py

def n_copies(nbytes):
    "How many copies of an operand make the rotation exceed 3x the L2 cache."
    return 1 if SMOKE else max(1, -(-3 * L2 // nbytes))

SHAPES = {'qkv': (4096, 6144), 'o': (4096, 4096), 'gate_up': (4096, 24576), 'down': (12288, 4096)}   # K -> N
if SMOKE: SHAPES = {'qkv': (64, 96), 'o': (64, 64), 'gate_up': (64, 384), 'down': (192, 64)}
W8 = {}

@section
def env():
    R['env'] = dict(torch=torch.__version__, triton=triton.__version__, python=sys.version.split()[0])
    if SMOKE: return
    p = torch.cuda.get_device_properties(0)
    R['env'].update(gpu=p.name, sms=p.multi_processor_count, smem_optin=getattr(p, 'shared_memory_per_block_optin', None),
                    l2=getattr(p, 'L2_cache_size', None), capability=torch.cuda.get_device_capability())
    src = torch.randn(2**29, device=DEV, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    R['copy_gbs'] = [2 * src.numel() * 2 / bench(lambda: dst.copy_(src)) / 1e3 for _ in range(2)]
    del src, dst
    a, b = (torch.randn(8192, 8192, device=DEV, dtype=torch.bfloat16) for _ in range(2))
    R['bf16_tflops'] = 2 * 8192**3 / bench(lambda: a @ b) / 1e6
    del a, b
    torch.cuda.empty_cache()
    log(R['env'], 'copy GB/s', [round(v) for v in R['copy_gbs']], 'bf16 TFLOP/s', round(R['bf16_tflops']))

def ref_mm(x, q, s, b=None):
    "fp32 reference on the dequantised weight (fp64 on the CPU)."
    if x.is_cuda:
        y = x.float() @ (q.float() * s.float()[:, None]).T
    else: y = (x.double() @ (q.double() * s.double()[:, None]).T).float()
    return y if b is None else y + b.float()

@section
def int8_correctness():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    out = []
    for name, (K, N) in SHAPES.items():
        W8[name] = quantize_weight(torch.randn(N, K, device=DEV, dtype=torch.bfloat16) * 0.02)
        q, s = W8[name]
        for M in (1, 7, 64, 300, 2048):
            for dtype in ((torch.bfloat16, torch.float16) if M in (1, 64) else (torch.bfloat16,)):
                x = torch.randn(M, K, device=DEV, dtype=dtype)
                b = torch.randn(N, device=DEV, dtype=dtype) if M == 7 else None
                o = torch.full((M, N), float('nan'), device=DEV, dtype=dtype)
                int8_matmul(x, q, s.to(dtype), b, out=o)
                e = rel_err(o, ref_mm(x, q, s.to(dtype), b))
                ok = bool(o.isfinite().all()) and e < (1e-2 if dtype == torch.bfloat16 else 2e-3)
                e2 = rel_err(w8_linear(x, q, s.to(dtype), b), ref_mm(x, q, s.to(dtype), b))
                out.append(dict(shape=name, M=M, dtype=str(dtype), rel_err=e, w8_linear_rel_err=e2, ok=ok and e2 < 1e-2))
                assert out[-1]['ok'], out[-1]
    x = torch.randn(3, 64, device=DEV)
    q, s = quantize_weight(torch.randn(40, 64, device=DEV))
    e = rel_err(int8_matmul(x, q, s), ref_mm(x, q, s))
    out.append(dict(shape='fp32 small', rel_err=e, ok=e < 1e-5))
    assert out[-1]['ok'], out[-1]
    R['int8_correctness'] = out
    for dt in ('torch.bfloat16', 'torch.float16'):
        log('int8 correct:', dt, 'worst relative error', max(r['rel_err'] for r in out if r.get('dtype') == dt))

DECODE = {1: [(1, 8, 512, 4, 1), (1, 8, 1024, 4, 1), (1, 16, 512, 4, 1), (1, 4, 1024, 4, 1), (1, 16, 1024, 8, 1),
              (16, 16, 256, 2, 4), (16, 16, 512, 2, 4), (16, 32, 256, 4, 5), (16, 64, 256, 4, 3), (16, 32, 128, 4, 3)],
          8: [(16, 32, 256, 4, 5), (16, 16, 512, 2, 4), (16, 64, 128, 4, 3), (16, 32, 128, 4, 5), (1, 8, 512, 4, 1)],
          32: [(16, 32, 256, 4, 3), (16, 32, 512, 4, 3), (32, 64, 128, 4, 4), (16, 64, 256, 4, 3), (32, 32, 128, 4, 4)],
          64: [(16, 64, 256, 4, 3), (64, 32, 256, 4, 4), (32, 128, 128, 4, 4), (64, 64, 128, 4, 4), (16, 64, 512, 4, 3)],
          128: [(64, 64, 128, 4, 4), (64, 128, 64, 4, 4)],
          256: [(64, 64, 128, 4, 4), (64, 128, 64, 4, 4), (128, 128, 64, 8, 3), (128, 128, 128, 8, 3)],
          512: [(128, 128, 64, 4, 4), (128, 128, 128, 8, 3), (64, 128, 64, 4, 4)],
          2048: [(128, 128, 64, 4, 4), (128, 128, 128, 8, 3)]}
if SMOKE: DECODE = {M: c[:2] for M, c in DECODE.items()}

@section
def int8_sweep():
    """Every variant per (shape, M), timed the same way: bf16 F.linear, the naive dequantise (PyTorch) + F.linear,
    the Triton dequantise + F.linear, and int8_matmul with each candidate tile configuration."""
    torch.manual_seed(1)
    res = []
    for name, (K, N) in SHAPES.items():
        q0, s0 = W8[name]
        nq, nb = n_copies(N * K), n_copies(2 * N * K)
        qs = [(q0.clone(), s0.clone()) for _ in range(nq)]
        ws = [dequantize_weight(q0, s0) for _ in range(nb)]
        for M, cfgs in (DECODE.items() if SWEEP else [(M, []) for M in (1, 8, 32, 64, 128, 2048)]):
            x = torch.randn(M, K, device=DEV, dtype=torch.bfloat16)
            ref = ref_mm(x, q0, s0)
            nc = max(8, nq) if M <= 256 else max(2, nq)
            variants = [('bf16', lambda i: (lambda w=ws[i % nb]: F.linear(x, w)), 2 * N * K),
                        ('naive', lambda i: (lambda qs_=qs[i % nq]: F.linear(x, qs_[0].to(x.dtype) * qs_[1][:, None])), N * K),
                        ('dequant+cublas', lambda i: (lambda qs_=qs[i % nq]: F.linear(x, dequantize_triton(*qs_, x.dtype))), N * K),
                        ('w8_linear', lambda i: (lambda qs_=qs[i % nq]: w8_linear(x, *qs_)), N * K)]
            variants += [(f"kernel{c}", (lambda c: lambda i: (lambda qs_=qs[i % nq]: int8_matmul(x, *qs_, config=c)))(c), N * K)
                         for c in cfgs]
            for label, make, wbytes in variants:
                try:
                    o = make(0)()
                    ok = bool(o.isfinite().all()) and rel_err(o, ref) < 1e-2
                    t = gtime([make(i) for i in range(nc)]) if ok else None
                except Exception as e:
                    ok, t = False, None
                    log('variant failed', name, M, label, repr(e)[:300])
                res.append(dict(shape=name, M=M, variant=label, ok=ok, us=t, gbs=None if t is None else wbytes / t / 1e3))
            row = {r['variant']: r['us'] for r in res if r['shape'] == name and r['M'] == M}
            best = min(((v, k) for k, v in row.items() if k.startswith('kernel') and v), default=(None, None))
            log(f"{name:8} M={M:5} bf16 {row['bf16']:7.1f}  naive {row['naive']:7.1f}  dequant+cublas {row['dequant+cublas']:7.1f}"
                f"  w8_linear {row['w8_linear']:7.1f}  best kernel {best[0] or 0:7.1f} {best[1]}"
                f"  x{row['bf16'] / row['w8_linear']:.2f} (best x{row['bf16'] / (best[0] or row['w8_linear']):.2f})")
        R['int8_sweep'] = res
        save()
        del qs, ws
        torch.cuda.empty_cache()

def random_qwen(cfg, dtype, seed=0):
    torch.manual_seed(seed)
    with torch.device(DEV): m = QwenForCausalLM(cfg)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if 'norm' in n: p.fill_(1.0)
            else: p.normal_(0, 0.02)
        m.model.norm.weight.fill_(10.0)
    return m.to(dtype).eval()

@section
def int8_quality():
    cfg = ModelConfig() if not SMOKE else ModelConfig(vocab_size=512, hidden_size=64, intermediate_size=128,
                                                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    T = 512 if not SMOKE else 16
    ids = torch.randint(0, cfg.vocab_size, (1, T), device=DEV, generator=torch.Generator(DEV).manual_seed(3))
    nbytes = lambda m: sum(t.numel() * t.element_size() for t in [*m.parameters(), *m.buffers()])
    lin_bytes = lambda m: sum(t.numel() * t.element_size() for l in m.model.layers for t in [*l.parameters(), *l.buffers()])
    def compare(a, b):
        with torch.no_grad(): la, lb = a(ids)[0].float(), b(ids)[0].float()
        kl = F.kl_div(lb.log_softmax(-1), la.log_softmax(-1), log_target=True, reduction='none').sum(-1)
        ent = -(la.softmax(-1) * la.log_softmax(-1)).sum(-1)
        return dict(kl_mean=kl.mean().item(), kl_max=kl.max().item(), greedy_agree=(la.argmax(-1) == lb.argmax(-1)).float().mean().item(),
                    ref_entropy=ent.mean().item(), ref_top1_prob=la.softmax(-1).amax(-1).mean().item())
    m32, m16, m8 = random_qwen(cfg, torch.float32), random_qwen(cfg, torch.bfloat16), random_qwen(cfg, torch.bfloat16)
    d = dict(decoder_bytes_bf16=lin_bytes(m8), model_bytes_bf16=nbytes(m8))
    quantize_model(m8)
    d.update(decoder_bytes_int8=lin_bytes(m8), model_bytes_int8=nbytes(m8), bf16_vs_fp32=compare(m32, m16),
             int8_vs_bf16=compare(m16, m8), int8_vs_fp32=compare(m32, m8))
    # a greedy continuation: how many of 32 generated tokens agree (int8 vs bf16), KV-cache-free reference loop
    if not SMOKE:
        from minillm.model import generate_naive
        prompt = ids[0, :64].tolist()
        g16, g8 = generate_naive(m16, prompt, 32), generate_naive(m8, prompt, 32)
        d['greedy_32_prefix_match'] = next((i for i, (a, b) in enumerate(zip(g16, g8)) if a != b), len(g16))
    R['int8_quality'] = d
    log('quality', json.dumps(d)[:600])
    del m32, m16, m8
    if not SMOKE: torch.cuda.empty_cache()

# ------------------------------------------------------------------ RMSNorm
@section
def rmsnorm_all():
    if builder is not None:
        builder.wait()
        R['rmsnorm_build_log'] = open(BUILD_LOG).read()[-4000:]
        log(R['rmsnorm_build_log'][-2000:])
    import helpers.rmsnorm_cuda as K                          # benchmarks/helpers/rmsnorm_cuda.py: chapter 14's kernel
    if SMOKE: return
    K.load()                                          # raises if the kernel cannot be built
    t_load = time.time()
    K.ext = None
    K.load()
    R['rmsnorm_cached_load_s'] = time.time() - t_load
    def torch_norm(x, w, eps, residual=None):
        "The reference: RMSNorm as the layers chapter computes it in PyTorch, optionally after the residual add."
        s = x if residual is None else x + residual
        h = s.float()
        out = w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(s.dtype)
        return out if residual is None else (out, s)
    def ulp_diff(a, b):
        d = (a.float() - b.float()).abs()
        return (d / (torch.finfo(a.dtype).eps * b.float().abs().clamp_min(torch.finfo(a.dtype).tiny))).max().item()
    corr = []
    torch.manual_seed(0)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for rows, width in [(5, 1024), (64, 4096), (3, 896), (300, 128), (7, 4097), (33, 127), (4, 1), (2, 16384), (9, 4104), (8192, 4096)]:
            w = torch.randn(width, device=DEV).to(dtype)
            base = torch.randn(rows * width + 8, device=DEV).to(dtype)
            x = base[3:3 + rows * width].view(rows, width) if width == 4104 else base[:rows * width].view(rows, width)
            r = torch.randn(rows, width, device=DEV).to(dtype) * 4
            for fused in (False, True):
                torch.empty(rows * width * 4, device=DEV, dtype=dtype).fill_(float('nan'))
                torch.cuda.synchronize()
                if fused:
                    (o, s), (ro, rs) = K.rms_norm(x, w, 1e-6, r), torch_norm(x, w, 1e-6, r)
                    res_exact = bool(torch.equal(s, rs))
                else: (o, ro), res_exact = (K.rms_norm(x, w, 1e-6), torch_norm(x, w, 1e-6)), True
                torch.cuda.synchronize()
                c = dict(dtype=str(dtype), rows=rows, width=width, fused=fused, finite=bool(o.isfinite().all()),
                         ulp=ulp_diff(o, ro), exact_frac=(o == ro).float().mean().item(), residual_exact=res_exact)
                c['ok'] = c['finite'] and c['ulp'] <= (4 if dtype == torch.float32 else 2) and res_exact
                corr.append(c)
    R['rmsnorm_correctness'] = corr
    bad = [c for c in corr if not c['ok']]
    log('rmsnorm correctness:', 'all ok' if not bad else f'{len(bad)} FAILED {bad[:3]}',
        'worst ulp', max(c['ulp'] for c in corr), 'min exact', min(c['exact_frac'] for c in corr))
    # microbenchmark
    src = torch.randn(2**29, device=DEV, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    copy_gbs = 2 * src.numel() * 2 / bench(lambda: dst.copy_(src)) / 1e3
    del src, dst
    torch.cuda.empty_cache()
    mb = []
    for (Rr, H) in [(1, 1024), (64, 4096), (8192, 4096), (16, 128)]:
        norm = RMSNorm(H).to(DEV, torch.bfloat16)
        nc = n_copies(2 * Rr * H * 2)                         # big shapes: rotate inputs so they come from HBM
        xs = [torch.randn(Rr, H, device=DEV, dtype=torch.bfloat16) for _ in range(min(nc, 8))]
        rs = [torch.randn(Rr, H, device=DEV, dtype=torch.bfloat16) for _ in range(min(nc, 8))]
        n = max(8, len(xs))
        with torch.no_grad():
            for name, ft, fc, nb in [('rms_norm', lambda x, r: norm(x), lambda x, r: K.rms_norm(x, norm.weight), 2 * Rr * H * 2),
                                     ('fused_add', lambda x, r: norm(x, r), lambda x, r: K.rms_norm(x, norm.weight, 1e-6, r), 4 * Rr * H * 2)]:
                mk = lambda f: [(lambda i=i: f(xs[i % len(xs)], rs[i % len(xs)])) for i in range(n)]
                tt, tc, tc2 = gtime(mk(ft)), gtime(mk(fc)), gtime(mk(fc))
                tf = bench(lambda: fc(xs[0], rs[0]))          # plain do_bench (L2 flushed, launch latency included)
                mb.append(dict(shape=(Rr, H), op=name, torch_us=tt, cuda_us=tc, cuda_us_again=tc2, cuda_us_flushed=tf,
                               speedup=tt / tc, gbs=nb / tc / 1e3, frac_copy=nb / tc / 1e3 / copy_gbs))
                log(f"{Rr:5}x{H:5} {name:9} torch {tt:7.1f} µs cuda {tc:7.1f} ({tc2:7.1f}; flushed {tf:6.1f}) x{tt / tc:5.1f} "
                    f"{nb / tc / 1e3:7.0f} GB/s = {nb / tc / 1e3 / copy_gbs:.1%} of copy {copy_gbs:.0f}")
        del xs, rs
    R['rmsnorm_bench'] = dict(copy_gbs=copy_gbs, rows=mb)
    save()
    # end to end: Qwen3-0.6B, one token, eager and CUDA graph
    def cuda_forward(self, x, residual=None): return K.rms_norm(x, self.weight, self.eps, residual)
    def no_norm(self, x, residual=None):
        if residual is None: return x
        s = x + residual
        return s, s
    def step_times(model, ids):
        with torch.inference_mode():
            eager = bench(lambda: model(ids), rep=300)
            st = torch.cuda.Stream()
            st.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(st):
                for _ in range(3): model(ids)
            torch.cuda.current_stream().wait_stream(st)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g): model(ids)
            graph = bench(g.replay, rep=100)
        return eager, graph
    m = random_qwen(ModelConfig(), torch.bfloat16)
    ids = torch.randint(0, 1000, (1, 1), device=DEV)
    orig = RMSNorm.forward
    e2e = {}
    try:
        for name, fwd in [('torch', orig), ('cuda', cuda_forward), ('no_norm', no_norm), ('torch2', orig), ('cuda2', cuda_forward)]:
            RMSNorm.forward = fwd
            e2e[name] = step_times(m, ids)
    finally:
        RMSNorm.forward = orig
    # same logits with the kernel (bf16: within rounding)
    with torch.no_grad():
        l0 = m(torch.randint(0, 1000, (1, 64), device=DEV, generator=torch.Generator(DEV).manual_seed(5)))
        RMSNorm.forward = cuda_forward
        try: l1 = m(torch.randint(0, 1000, (1, 64), device=DEV, generator=torch.Generator(DEV).manual_seed(5)))
        finally: RMSNorm.forward = orig
    e2e['logits_rel_err'] = rel_err(l1, l0)
    e2e['argmax_agree'] = (l1.argmax(-1) == l0.argmax(-1)).float().mean().item()
    R['rmsnorm_e2e'] = e2e
    for mode, i in (('eager', 0), ('graph', 1)):
        tp, tc, t0 = e2e['torch'][i], e2e['cuda'][i], e2e['no_norm'][i]
        f = (tp - t0) / tp
        log(f"e2e {mode:5} torch {tp:8.1f} µs cuda {tc:8.1f} no-norm {t0:8.1f}  f={f:.1%}  step x{tp / tc:.2f}  "
            f"(repeat: torch {e2e['torch2'][i]:.1f} cuda {e2e['cuda2'][i]:.1f})")
    log('e2e logits rel err', e2e['logits_rel_err'], 'argmax agree', e2e['argmax_agree'])

# ------------------------------------------------------------------ run: the sweep last (it is the longest)
for name in ('env', 'int8_correctness', 'int8_sweep', 'int8_quality', 'rmsnorm_all'): run_section(name)

# ------------------------------------------------------------------ summary
print("\n==== summary ====")
print("errors:", list(R['errors']) or 'none')
if 'copy_gbs' in R: print(f"copy {R['copy_gbs'][0]:.0f} GB/s, bf16 matmul {R['bf16_tflops']:.0f} TFLOP/s")
rows = {}
for r in R.get('int8_sweep', []): rows.setdefault((r['shape'], r['M']), {})[r['variant']] = r['us']
for (shape, M), v in rows.items():
    if M not in (1, 8, 32, 64, 2048): continue
    best = min(((t, k) for k, t in v.items() if k.startswith('kernel') and t), default=(None, ''))
    print(f"int8 {shape:8} M={M:5} bf16 {v['bf16']:7.1f} µs  naive {v['naive']:7.1f}  deq+cublas {v['dequant+cublas']:7.1f}"
          f"  w8_linear {v['w8_linear']:7.1f} x{v['bf16'] / v['w8_linear']:.2f}  best {best[0] or 0:7.1f} {best[1]}")
if 'int8_quality' in R:
    q = R['int8_quality']
    print(f"quality int8 vs bf16 {q['int8_vs_bf16']}  bf16 vs fp32 {q['bf16_vs_fp32']}")
    print(f"bytes: decoder {q['decoder_bytes_bf16'] / 1e6:.0f} -> {q['decoder_bytes_int8'] / 1e6:.0f} MB, "
          f"model {q['model_bytes_bf16'] / 1e6:.0f} -> {q['model_bytes_int8'] / 1e6:.0f} MB")
for r in R.get('rmsnorm_bench', {}).get('rows', []):
    print(f"rmsnorm {str(r['shape']):12} {r['op']:9} torch {r['torch_us']:7.1f} µs  cuda {r['cuda_us']:7.1f} µs  "
          f"x{r['speedup']:5.1f}  {r['gbs']:6.0f} GB/s ({r['frac_copy']:.0%} of copy)")
save()
log("done")
