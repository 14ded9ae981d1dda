#!/usr/bin/env python3
"""Where the GPU sits idle in a throughput run: 256 requests of 256 -> 128 greedy tokens on random-weight Qwen3-0.6B
(bf16, engine defaults, prefix caching off), one `LLM.generate` under the PyTorch profiler after a warm-up run of
the same shapes. The kernels' intervals (those replayed from CUDA graphs included) are merged into busy time; the
gaps between them are summed by size and by the phase of the run they fall in (among the prompt steps, among the
decode steps), and the longest are listed with their neighbours; the kernels' own time is summed by name. One more
run under `torch.cuda.set_sync_debug_mode('warn')` counts, by line, the calls at which the host waited for the GPU,
and one more, unprofiled, times the host in each engine step (prompt steps and decode steps apart) and, of that, the
wait for a step's tokens: a host that is busy the whole step long is what the GPU waits for.

With `--workload=nanovllm` (or `nanovllm-greedy`) the profile is of nano-vllm's benchmark workload (256 requests of 100
to 1,024 prompt tokens and as many outputs; sampled at temperature 0.6, or greedy) instead of 256 x 256 -> 128.

With `--max-batched=8192,16384`: one engine per value of `max_num_batched_tokens` (the most tokens a step), each timed
without the profiler (the median of three runs, the engines taking turns twice) on this workload and on nano-vllm's
greedy one, and the first profiled as above: bigger prompt steps give the GPU more work per step the host prepares.

Run from the repository root:  PYTHONPATH=.:benchmarks python3 benchmarks/gpu_gaps_gpu.py [--max-batched=N,...]
    [--workload=batch|nanovllm|nanovllm-greedy] [--smoke]
--smoke runs the tiny model on the CPU (no GPU kernels: the gaps are empty), to check the script. Writes
gpu_gaps_gpu.json to $OUT if set, else to benchmarks/results/.
"""
import sys, time, statistics, gc, warnings
from collections import Counter
from pathlib import Path
import torch
from torch.profiler import profile, ProfilerActivity
from minillm import LLM, SamplingParams
from minillm.loading import random_checkpoint, PRESETS
from minillm.workloads import nanovllm_workload, make_requests
from helpers.bench_io import log, saver, run_section

SMOKE = '--smoke' in sys.argv
R = dict(argv=sys.argv, errors={}, timed={})
save = saver(R, 'gpu_gaps_gpu')
B, P, N = (4, 16, 4) if SMOKE else (256, 256, 128)
DEV = 'cpu' if SMOKE else 'cuda'
WORKLOAD = next((a.split('=', 1)[1] for a in sys.argv[1:] if a.startswith('--workload=')), 'batch')
if WORKLOAD not in ('batch', 'nanovllm', 'nanovllm-greedy'):
    sys.exit(f"--workload must be batch, nanovllm or nanovllm-greedy, got {WORKLOAD!r}")
SIZES = next(([int(v) for v in a.split('=', 1)[1].split(',')] for a in sys.argv[1:]
              if a.startswith('--max-batched=')), None)

def sync():
    if torch.cuda.is_available(): torch.cuda.synchronize()

def kernels(prof):
    "(start µs, end µs, name) of every GPU kernel and copy the profiler saw, in time order."
    ev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return sorted((e.time_range.start, e.time_range.end, e.name) for e in ev)

def gaps(llm, ps, sps, key):
    "Profile one run of `ps`, merge its kernels' intervals, and record the gaps under `R[key]`."
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=acts) as prof:
        t0 = time.perf_counter()
        llm.generate(ps, sps, use_tqdm=False)
        sync()
        wall = time.perf_counter() - t0
    ks = kernels(prof)
    R[key] = r = dict(wall_s=wall, tokens_per_s=sum(sp.max_tokens for sp in sps) / wall, kernels=len(ks))
    if not ks:
        log(key, 'no GPU kernels')
        return
    first_decode = next((i for i, k in enumerate(ks) if 'decode' in k[2]), len(ks))   # the decode attention
    busy, gap_list, end = 0.0, [], ks[0][0]
    for i, (s, e, name) in enumerate(ks):
        if s > end: gap_list.append((end, s - end, i))
        busy += max(0.0, e - max(s, end))
        end = max(end, e)
    span = end - ks[0][0]
    by_phase = {'prompt steps': 0.0, 'decode steps': 0.0}
    for at, d, i in gap_list: by_phase['decode steps' if i > first_decode else 'prompt steps'] += d
    sizes = {f'< {b} µs': sum(d for _, d, _ in gap_list if lo <= d < b)
             for lo, b in ((0, 10), (10, 50), (50, 200), (200, 1000), (1000, 10**9))}
    top = sorted(gap_list, key=lambda g: -g[1])[:15]
    by_kernel = {}                                    # µs of each kernel name, summed over the run
    for s_, e, name in ks: by_kernel[name[:70]] = by_kernel.get(name[:70], 0.0) + e - s_
    r['kernel_us'] = dict(sorted(by_kernel.items(), key=lambda kv: -kv[1])[:20])
    r.update(span_us=span, busy_us=busy, gaps_us=span - busy, gaps_by_phase_us=by_phase, gaps_by_size_us=sizes,
             first_decode_us=ks[first_decode][0] - ks[0][0] if first_decode < len(ks) else None,
             longest=[dict(at_us=at - ks[0][0], us=d, before=ks[i - 1][2][:60], after=ks[i][2][:60],
                           decode=i > first_decode) for at, d, i in top])
    log(f"{key}: wall {wall * 1e3:.1f} ms under the profiler; kernels from first to last {span / 1e3:.1f} ms, "
        f"busy {busy / 1e3:.1f} ms ({busy / span:.0%}), {len(ks)} kernels")
    log('gaps by phase (ms): ' + ', '.join(f'{k} {v / 1e3:.1f}' for k, v in by_phase.items()))
    log('gaps by size (ms): ' + ', '.join(f'{k} {v / 1e3:.1f}' for k, v in sizes.items()))
    for name, us in list(r['kernel_us'].items())[:12]: log(f"  {us / 1e3:8.1f} ms  {name}")
    for g in r['longest']:
        log(f"  {g['us']:8.0f} µs at {g['at_us'] / 1e3:7.1f} ms ({'decode' if g['decode'] else 'prompts'}): "
            f"{g['before']} -> {g['after']}")

def syncs(llm, ps, sps, key):
    "One more run with `torch.cuda.set_sync_debug_mode('warn')`: where the host waited for the GPU, counted by line."
    if not torch.cuda.is_available(): return
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter('always')
        torch.cuda.set_sync_debug_mode('warn')
        try: llm.generate(ps, sps, use_tqdm=False)
        finally: torch.cuda.set_sync_debug_mode(0)
    where = Counter(f"{Path(w.filename).name}:{w.lineno}" for w in ws if 'synchroniz' in str(w.message))
    R[key]['syncs'] = dict(where.most_common(20))
    log(f"{key}: {sum(where.values())} synchronizing calls: "
        + ', '.join(f'{k} x{v}' for k, v in where.most_common(8)))

def host(llm, ps, sps, key):
    "One more run, unprofiled: the host's time in each engine step and, of it, the time spent waiting for a step's tokens, summed over the prompt steps (any sequence with more than one new token) and the decode steps."
    st, acc, now = llm.engine.stepper, {}, [None]
    step, tokens = st.step, getattr(st, 'tokens', None)
    def timed_step(engine, scheduled):
        kind = 'prompt steps' if any(n > 1 for _, n in scheduled) else 'decode steps'
        now[0] = a = acc.setdefault(kind, dict(steps=0, host_ms=0.0, waiting_ms=0.0))
        t0 = time.perf_counter()
        try: return step(engine, scheduled)
        finally:
            a['steps'] += 1
            a['host_ms'] += (time.perf_counter() - t0) * 1e3
    def timed_tokens(*args, **kw):                            # within a step, or the drain after the last
        t0 = time.perf_counter()
        try: return tokens(*args, **kw)
        finally: now[0]['waiting_ms'] += (time.perf_counter() - t0) * 1e3
    st.step = timed_step
    if tokens is not None: st.tokens = timed_tokens
    try:
        sync()
        t0 = time.perf_counter()
        llm.generate(ps, sps, use_tqdm=False)
        sync()
        wall = time.perf_counter() - t0
    finally:
        del st.step
        if tokens is not None: del st.tokens
    R[key]['host'] = dict(wall_ms=wall * 1e3, **acc)
    log(f"{key}, unprofiled: wall {wall * 1e3:.1f} ms; " + '; '.join(
        f"{k}: {a['steps']} steps, host {a['host_ms']:.1f} ms of which waiting for tokens {a['waiting_ms']:.1f}"
        for k, a in acc.items()))

def nanovllm(t: float) -> tuple:
    "nano-vllm's workload at temperature `t` (fresh ids of its lengths; tiny with --smoke): (name, prompts, params)."
    spec = nanovllm_workload(temperature=t) | (dict(num_requests=4, lo=4, hi=16) if SMOKE else {})
    prompts, outs = make_requests(spec, variant=1)
    return (f"nanovllm {'greedy' if t == 0 else f'temperature {t}'}", prompts,
            [SamplingParams(temperature=t, max_tokens=n, ignore_eos=True) for n in outs])

def workloads():
    "(name, prompts, sampling params): 256 x 256 -> 128 greedy, and nano-vllm's workload greedy."
    ps = torch.randint(0, 151643, (B, P), generator=torch.Generator().manual_seed(0)).tolist()
    runs = [(f'{B} x {P} -> {N}', ps, [SamplingParams(temperature=0, max_tokens=N, ignore_eos=True)] * B)]
    return runs + [nanovllm(0.0)]

def engine(ck, size=None):
    kw = {} if size is None else dict(max_num_batched_tokens=size)
    return LLM(str(ck), dtype='bfloat16', device=DEV, enable_prefix_caching=False, **kw)

def run():
    ck = random_checkpoint(**PRESETS['tiny-qwen3' if SMOKE else 'qwen3-0.6b'], dtype=torch.bfloat16, device=DEV)
    runs = workloads()
    if SIZES is None:                                         # the defaults: the gaps of 256 x 256 -> 128
        llm = engine(ck)
        name, ps, sps = nanovllm(0.6) if WORKLOAD == 'nanovllm' else runs[WORKLOAD == 'nanovllm-greedy']
        llm.generate(ps, sps, use_tqdm=False)                                # warm-up at the timed shapes
        key = 'profile' if WORKLOAD == 'batch' else f'profile {name}'
        gaps(llm, ps, sps, key)
        syncs(llm, ps, sps, key)
        host(llm, ps, sps, key)
        return
    for turn in range(2):                                     # the engines taking turns, each built afresh
        for size in SIZES:
            llm = engine(ck, size)
            for name, ps, sps in runs:
                llm.generate(ps, sps, use_tqdm=False)
                ts = []
                for _ in range(3):
                    sync()
                    t0 = time.perf_counter()
                    llm.generate(ps, sps, use_tqdm=False)
                    sync()
                    ts.append(time.perf_counter() - t0)
                tok_s = sum(sp.max_tokens for sp in sps) / statistics.median(ts)
                R['timed'].setdefault(f'{name}, max_num_batched_tokens {size}', []).append(tok_s)
                log(f"turn {turn}: {name:22} max_num_batched_tokens {size:6}: {tok_s:9,.0f} tokens/s")
                if turn == 1 and name == runs[0][0]:          # the profile of the first workload
                    key = f'profile {name}, max_num_batched_tokens {size}'
                    gaps(llm, ps, sps, key)
                    syncs(llm, ps, sps, key)
                    host(llm, ps, sps, key)
                save()
            del llm
            gc.collect()
            if torch.cuda.is_available(): torch.cuda.empty_cache()

run_section(run, R, save)
log('done')
