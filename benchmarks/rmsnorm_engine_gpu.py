#!/usr/bin/env python3
"""RMSNorm in the engine: the Triton norm (chapter 10a, what `use_fused_kernels` gives every `RMSNorm.kernel`) against
the CUDA kernel (chapter 14, csrc/rmsnorm.cu, built by helpers/rmsnorm_cuda.py), as tokens/s of `LLM.generate` on random-weight Qwen3-0.6B.

Run from the repository root:  PYTHONPATH=.:benchmarks python3 benchmarks/rmsnorm_engine_gpu.py [--repeats 5]
About 40 s with warm caches; about 90 s on a fresh machine, where the extension's nvcc build (72 s there, chapter
14) runs alongside the checkpoint, the Triton compiles and the first engine, and every timing waits for it.
  --smoke  CPU dry run on tiny-qwen3 (Triton interpreter, graphs emulated): checks the script, measures nothing; the
           CUDA variant cannot run there and is recorded as an error

What it does:
  * builds the CUDA extension in a background process from the start (about a minute when not cached), while it
    builds the checkpoint and two engines of the same settings (bf16, max_num_seqs 64, a fixed KV pool);
  * engine A keeps the Triton norm, engine B gets every `RMSNorm.kernel` pointed at the CUDA kernel
    (`rmsnorm_cuda.rms_norm`, which has the Triton norm's signature and results). The engine captures
    its graphs at start-up with the norm it had then, so each engine's graphs are captured again after the kernel
    is set (A too, with the same kernel, so that both take the same path);
  * during that capture and the warm-up runs, each norm module's kernel and the runner's forward are wrapped to
    count which norms run in each captured graph and eager step (and, for B, how many calls reached the compiled
    extension). At batch 1 on Qwen3-0.6B the fused decoder layer folds the two
    norms of each layer into its GEMVs, and the rotary kernel the q/k norms, so only the final norm runs there;
    the table says so. The wrappers are removed before timing (graphs hold only the kernels);
  * once the build is done (so that nvcc shares no CPU with a timing), times A, then B, then A again (drift):
    `--repeats` runs of `generate` per batch size, greedy, `--max-tokens` tokens after `--prompt-len`-token prompts,
    1 and 64 prompts; two warm-up runs first, so the timed runs find the prompts in the prefix cache, as
    `fastpath_gpu.py e2e` does; tokens/s = batch x max_tokens / median seconds, and the ratio against the mean of
    the two Triton passes;
  * compares the greedy tokens of B (and of A's second pass) with A's.
Writes rmsnorm_engine_gpu.json to $OUT if set, else to benchmarks/results/ (date and commit stamped by bench_io).
"""
import argparse, gc, os, statistics, subprocess, sys, tempfile, time
from collections import Counter

SMOKE = '--smoke' in sys.argv
if SMOKE: os.environ.setdefault('TRITON_INTERPRET', '1')    # before triton is imported
BUILD_LOG = os.path.join(tempfile.gettempdir(), 'minillm_rmsnorm_engine_build.log')

def start_build():
    "Compile (or load from the extension cache) the CUDA RMSNorm kernel in another process; returns the process."
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'helpers', 'rmsnorm_cuda.py')
    return subprocess.Popen([sys.executable, script], stdout=open(BUILD_LOG, 'w'), stderr=subprocess.STDOUT)

BUILDER = start_build() if __name__ == '__main__' and not SMOKE else None    # first: it is the longest part

import torch
import triton
from minillm import LLM, SamplingParams
from minillm.loading import random_checkpoint, PRESETS
from minillm.layers import RMSNorm
from minillm.cuda_graphs import graphs_plugin
import minillm.kernels.fused as FK
import helpers.rmsnorm_cuda as RC                                    # benchmarks/helpers/rmsnorm_cuda.py
from helpers.bench_io import log, saver, run_section                # benchmarks/helpers/bench_io.py

class CountingExt:
    "Stands in for the compiled extension while counting: forwards every call, counts it."
    def __init__(self, ext): self.ext, self.calls = ext, 0
    def rms_norm(self, *a):
        self.calls += 1
        return self.ext.rms_norm(*a)
    def fused_add_rms_norm(self, *a):
        self.calls += 1
        return self.ext.fused_add_rms_norm(*a)

class Recorder:
    "Wraps norm kernels and the runner's forward: per forward (graph capture, emulated replay or eager step), the norms that ran."
    def __init__(self, ext=None): self.calls, self.ext, self.steps, self.noncontig = [], ext, {}, 0
    def norm(self, kernel, name):
        def counted(x, weight, eps, residual=None):
            self.calls.append(name)
            self.noncontig += not (x.is_contiguous() and (residual is None or residual.is_contiguous()))
            return kernel(x, weight, eps, residual)
        return counted
    def forward(self, fwd, graphed):
        def counted(batch):
            n0, e0 = len(self.calls), self.ext.calls if self.ext else 0
            out = fwd(batch)
            S, N = batch.block_tables.shape[0], batch.input_ids.shape[0]
            how = 'graph' if batch.padded and graphed else 'eager'      # captured, or run as written (or emulated)
            names = self.calls[n0:]
            self.steps[f"{how} {batch.kind} S={S} N={N}"] = dict(
                norm_calls=len(names), by_module=dict(Counter(n.rsplit('.', 1)[-1] for n in names)),
                ext_calls=(self.ext.calls - e0) if self.ext else None)
            return out
        return counted

def sync(dev):
    if dev == 'cuda': torch.cuda.synchronize()

def run_generate(llm, prompts, sp, dev):
    "Seconds of one `generate`, and each prompt's tokens."
    sync(dev)
    t0 = time.perf_counter()
    outs = llm.generate(prompts, sp, use_tqdm=False)
    sync(dev)
    return time.perf_counter() - t0, [list(o.outputs[0].token_ids) for o in outs]

def prepare(llm, kernel, args, prompts, sp, ext=None) -> dict:
    """Point every `RMSNorm.kernel` of `llm` at `kernel`, capture its graphs again and warm it up, counting which
    norms run in each forward; returns the counts. The counting wrappers are gone when it returns."""
    eng = llm.engine
    r = eng.runner
    assert not eng.config.speculative_tokens, 'graphs_plugin alone re-captures only without speculation'
    norms = [(n, m) for n, m in eng.model.named_modules() if isinstance(m, RMSNorm)]
    had = sorted({f"{m.kernel.__module__}.{m.kernel.__qualname__}" if m.kernel else 'None (PyTorch)' for _, m in norms})
    rec = Recorder(CountingExt(ext) if ext is not None else None)
    saved_ext = RC.ext
    for n, m in norms: m.kernel = rec.norm(kernel, n)
    r.forward = rec.forward(r.forward, graphed=eng.cuda_graphs == 'on')   # instance attribute over the method
    if rec.ext is not None: RC.ext = rec.ext
    t0 = time.time()
    try:
        if r.graphs is not None:                   # captured at start-up with the old kernel: capture again
            r.graphs = None
            gc.collect()
            if args.device == 'cuda': torch.cuda.empty_cache()
            graphs_plugin(eng)
        t_capture = time.time() - t0
        for b in args.batches:
            for _ in range(2): run_generate(llm, prompts[b], sp, args.device)   # compile, fill the prefix cache
    finally:
        for _, m in norms: m.kernel = kernel
        r.__dict__.pop('forward', None)
        RC.ext = saved_ext
    return dict(kernel_before=had, kernel_now=f"{kernel.__module__}.{kernel.__qualname__}", rms_norm_modules=len(norms),
                modules_by_name=dict(Counter(n.rsplit('.', 1)[-1] for n, _ in norms)), recapture_s=t_capture,
                warmup_s=time.time() - t0 - t_capture, noncontiguous_inputs=rec.noncontig, steps=rec.steps,
                graph_mode=eng.cuda_graphs)

def timings(llm, args, prompts, sp, tokens: dict) -> dict:
    "Per batch size: `--repeats` timed runs of generate, tokens/s from the median; the first run's tokens into `tokens`."
    out = {}
    for b in args.batches:
        runs = [run_generate(llm, prompts[b], sp, args.device) for _ in range(args.repeats)]
        times = [t for t, _ in runs]
        toks = runs[0][1]
        out[b] = dict(times_s=times, tok_s=b * sp.max_tokens / statistics.median(times),
                      repeats_same_tokens=sum(r[1] == toks for r in runs[1:]))
        tokens[b] = toks
        log(f"  batch {b:3}: {out[b]['tok_s']:9.1f} tokens/s  (runs {', '.join(f'{t * 1e3:.0f}' for t in times)} ms)")
    return out

def agreement(a, b) -> dict:
    "How far two lists of greedy sequences agree."
    prefix = [next((i for i, (u, v) in enumerate(zip(x, y)) if u != v), min(len(x), len(y))) for x, y in zip(a, b)]
    return dict(sequences=len(a), identical=sum(x == y for x, y in zip(a, b)),
                tokens_equal=sum(u == v for x, y in zip(a, b) for u, v in zip(x, y)), tokens=sum(map(len, a)),
                mean_common_prefix=statistics.mean(prefix) if prefix else 0)

def decode_counts(prep, b):
    "(key, counts) of the decode step that runs batch `b`: its graph's bucket (or the eager/emulated step)."
    steps = prep.get('steps', {})
    for how in ('graph', 'eager'):
        sized = sorted((int(k.split('S=')[1].split()[0]), k) for k in steps if k.startswith(f'{how} decode '))
        key = next((k for s, k in sized if s >= b), None)
        if key is not None: return key, steps[key]
    return None, None

def show(name, prep):
    "Log what `prepare` found: the kernel the engine had, and the norms each kind of step ran."
    log(f"{name}: {prep['rms_norm_modules']} RMSNorm modules {prep['modules_by_name']}; kernel was {prep['kernel_before']}, "
        f"now {prep['kernel_now']}; graphs {prep['graph_mode']}, captured again in {prep['recapture_s']:.1f} s")
    for k, c in prep['steps'].items():
        ext = '' if c['ext_calls'] is None else f", {c['ext_calls']} reached the CUDA extension"
        log(f"  {k:28} {c['norm_calls']:3} norm calls {c['by_module']}{ext}")

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--smoke', action='store_true')
    ap.add_argument('--preset', default=None, choices=sorted(PRESETS))
    ap.add_argument('--batches', default=None, help='comma-separated batch sizes (default 1,64; --smoke: 1,4)')
    ap.add_argument('--repeats', type=int, default=5)
    ap.add_argument('--max-tokens', type=int, default=128)
    ap.add_argument('--prompt-len', type=int, default=256)
    args = ap.parse_args(argv)
    args.batches = [int(b) for b in (args.batches or ('1,4' if args.smoke else '1,64')).split(',')]
    args.device = 'cpu' if args.smoke else 'cuda'
    preset = args.preset or ('tiny-qwen3' if args.smoke else 'qwen3-0.6b')
    builder = BUILDER if args.device == 'cuda' else None

    R = dict(argv=sys.argv if argv is None else argv, errors={}, preset=preset, smoke=args.smoke,
             env=dict(gpu=torch.cuda.get_device_name() if args.device == 'cuda' else 'cpu', torch=torch.__version__,
                      triton=triton.__version__, python=sys.version.split()[0]),
             settings=dict(batches=args.batches, repeats=args.repeats, max_tokens=args.max_tokens,
                           prompt_len=args.prompt_len))
    save = saver(R, 'rmsnorm_engine_gpu')
    kw = dict(max_num_seqs=max(args.batches), max_model_len=4096,
              num_kv_blocks=max(64, 2 * max(args.batches) * -(-(args.prompt_len + args.max_tokens) // 16)))
    if args.smoke: kw.update(attention_backend='triton', cuda_graphs='emulate')
    R['engine_kw'] = kw
    dt = torch.float32 if args.smoke else torch.bfloat16
    ck = random_checkpoint(**PRESETS[preset], dtype=dt, device=args.device)
    log('checkpoint', ck)
    g = torch.Generator().manual_seed(7)
    prompts = {b: torch.randint(0, 151643, (b, args.prompt_len), generator=g).tolist() for b in args.batches}
    sp = SamplingParams(temperature=0, max_tokens=args.max_tokens, ignore_eos=True)
    new_llm = lambda: LLM(str(ck), dtype=str(dt)[6:], device=args.device, **kw)
    S, T = dict(), dict()                           # the engines, and each variant's tokens, between sections
    R['runs'], R['prepare'] = {}, {}

    def triton_engine():
        "Engine A: the Triton norm (the engine as it is); its graphs captured again, warmed up, counted."
        t0 = time.time()
        S['A'] = new_llm()
        R['init_s_A'] = time.time() - t0
        R['prepare']['triton'] = prepare(S['A'], FK.rms_norm, args, prompts, sp)
        show('triton', R['prepare']['triton'])
        # B too, while the build runs
        t0 = time.time()
        S['B'] = new_llm()
        R['init_s_B'] = time.time() - t0

    def build():
        "Wait for the CUDA kernel's build; check it against the Triton norm on the engine's shapes."
        if builder is None and args.device == 'cuda':
            log('building (or loading) the CUDA RMSNorm kernel in this process')   # main() called from elsewhere
        if builder is not None:
            log('waiting for the CUDA RMSNorm build')
            builder.wait()
            R['build_log'] = open(BUILD_LOG).read()[-3000:]
            log(R['build_log'].strip().splitlines()[-1] if R['build_log'].strip() else '(empty build log)')
            if 'build ok' not in R['build_log']: raise RuntimeError('the CUDA RMSNorm extension did not build')
        # raises if it cannot be built
        t0 = time.time()
        RC.load()
        R['ext_load_s'] = time.time() - t0
        gen = torch.Generator(args.device).manual_seed(3)
        H = PRESETS[preset]['hidden_size']
        res = {}
        for rows in args.batches:
            x, r = (torch.randn(rows, H, device=args.device, generator=gen).to(dt) for _ in range(2))
            w = (1 + 0.1 * torch.randn(H, device=args.device, generator=gen)).to(dt)
            for name, resid in (('rms_norm', None), ('fused_add', r)):
                a, c = FK.rms_norm(x, w, 1e-6, resid), RC.rms_norm(x, w, 1e-6, resid)
                a, c = (a, c) if resid is not None else ((a,), (c,))
                res[f'{rows}x{H} {name}'] = dict(bit_identical_frac=[(u == v).float().mean().item() for u, v in zip(a, c)],
                                                 max_abs_diff=[(u.float() - v.float()).abs().max().item() for u, v in zip(a, c)])
        R['kernel_vs_triton'] = res
        log('CUDA kernel vs Triton norm (fraction of bit-identical outputs):',
            {k: [round(f, 6) for f in v['bit_identical_frac']] for k, v in res.items()})

    def time_triton():
        log('A: Triton norm')
        R['runs']['triton'] = timings(S['A'], args, prompts, sp, T.setdefault('triton', {}))

    def cuda_engine():
        "Engine B: every RMSNorm.kernel on the CUDA kernel, graphs captured again, warmed up, counted, timed."
        if RC.ext is None: raise RuntimeError('no CUDA RMSNorm kernel (see the build section)')
        R['prepare']['cuda'] = prepare(S['B'], RC.rms_norm, args, prompts, sp, ext=RC.ext)
        show('cuda', R['prepare']['cuda'])
        log('B: CUDA kernel')
        R['runs']['cuda'] = timings(S['B'], args, prompts, sp, T.setdefault('cuda', {}))

    def time_triton_again():
        log('A again: Triton norm')
        R['runs']['triton_again'] = timings(S['A'], args, prompts, sp, T.setdefault('triton_again', {}))

    def compare():
        ref = T.get('triton')
        if not ref: raise RuntimeError('no Triton run to compare with')
        R['agreement'] = {f'{v} vs triton': {b: agreement(ref[b], T[v][b]) for b in args.batches if b in T[v]}
                          for v in ('cuda', 'triton_again') if v in T}
        for k, v in R['agreement'].items(): log(k, {b: f"{a['identical']}/{a['sequences']} sequences" for b, a in v.items()})

    for fn in (triton_engine, build, time_triton, cuda_engine, time_triton_again, compare): run_section(fn, R, save)
    for k in list(S): S.pop(k).close()

    # the table
    runs = R['runs']
    base = {b: (runs['triton'][b]['tok_s'] + runs['triton_again'][b]['tok_s']) / 2 if 'triton_again' in runs
            else runs['triton'][b]['tok_s'] for b in args.batches} if 'triton' in runs else {}
    R['summary'] = []
    print(f"\n{preset}, {args.prompt_len}-token prompts -> {args.max_tokens} tokens, median of {args.repeats}; "
          "ratio against the mean of the two Triton passes")
    print(f"{'variant':13} {'batch':>5} {'tokens/s':>10} {'vs Triton':>9}  norms run per decode step (reached the CUDA extension)")
    for v in ('triton', 'cuda', 'triton_again'):
        if v not in runs: continue
        prep = R['prepare'].get('triton' if v == 'triton_again' else v, {})
        for b in args.batches:
            key, c = decode_counts(prep, b) if prep else (None, None)
            tok = runs[v][b]['tok_s']
            row = dict(variant=v, batch=b, tok_s=tok, ratio=tok / base[b] if b in base else None, decode_step=key,
                       norms_per_step=c['norm_calls'] if c else None, by_module=c['by_module'] if c else None,
                       ext_calls=c['ext_calls'] if c else None)
            R['summary'].append(row)
            where = ', '.join(f'{n} {m}' for n, m in (c['by_module'] if c else {}).items())
            ext = '' if not c or c['ext_calls'] is None else f" ({c['ext_calls']})"
            print(f"{v:13} {b:5} {tok:10.1f} {row['ratio'] or 0:9.3f}  "
                  f"{c['norm_calls'] if c else '?'}{ext} of {prep.get('rms_norm_modules', '?')} modules [{where}] in {key}")
    save()
    log('done; errors in:', list(R['errors']) or 'none')
    return R

if __name__ == '__main__': main()
