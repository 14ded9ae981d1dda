#!/usr/bin/env python3
"""Where the GPU sits idle in a throughput run: one `LLM.generate` of 256 requests of 256 -> 128 greedy tokens on
random-weight Qwen3-0.6B (bf16, engine defaults, prefix caching off) under the PyTorch profiler, after a warm-up run
of the same shapes. The kernels' intervals (those replayed from CUDA graphs included) are merged into busy time; the
gaps between them are summed by size and by the phase of the run they fall in (before the first kernel, among the
prompt steps, among the decode steps, after the last kernel), and the longest are listed with their neighbours.

Run from the repository root:  PYTHONPATH=.:benchmarks python3 benchmarks/gpu_gaps_gpu.py [--smoke]
--smoke runs the tiny model on the CPU (no GPU kernels: the gaps are empty), to check the script. Writes
gpu_gaps_gpu.json to $OUT if set, else to benchmarks/results/.
"""
import sys, time
import torch
from torch.profiler import profile, ProfilerActivity
from minillm import LLM, SamplingParams
from minillm.loading import random_checkpoint, PRESETS
from helpers.bench_io import log, saver, run_section

SMOKE = '--smoke' in sys.argv
R = dict(argv=sys.argv, errors={})
save = saver(R, 'gpu_gaps_gpu')
B, P, N = (4, 16, 4) if SMOKE else (256, 256, 128)

def kernels(prof):
    "(start µs, end µs, name) of every GPU kernel and copy the profiler saw, in time order."
    ev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return sorted((e.time_range.start, e.time_range.end, e.name) for e in ev)

def gaps():
    ck = random_checkpoint(**PRESETS['tiny-qwen3' if SMOKE else 'qwen3-0.6b'], dtype=torch.bfloat16,
                           device='cpu' if SMOKE else 'cuda')
    llm = LLM(str(ck), dtype='bfloat16', device='cpu' if SMOKE else 'cuda', enable_prefix_caching=False)
    ps = torch.randint(0, 151643, (B, P), generator=torch.Generator().manual_seed(0)).tolist()
    sp = SamplingParams(temperature=0, max_tokens=N, ignore_eos=True)
    llm.generate(ps, sp, use_tqdm=False)                                  # warm-up at the timed shapes
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=acts) as prof:
        t0 = time.perf_counter(); llm.generate(ps, sp, use_tqdm=False)
        if torch.cuda.is_available(): torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    ks = kernels(prof)
    R.update(wall_s=wall, tokens_per_s=B * N / wall, kernels=len(ks))
    if not ks: log('no GPU kernels'); return
    first_decode = next((i for i, k in enumerate(ks) if 'decode' in k[2]), len(ks))   # the decode attention
    busy, gap_list, end = 0.0, [], ks[0][0]
    for i, (s, e, name) in enumerate(ks):
        if s > end: gap_list.append((end, s - end, i))
        busy += max(0.0, e - max(s, end)); end = max(end, e)
    span = end - ks[0][0]
    by_phase = {'prompt steps': 0.0, 'decode steps': 0.0}
    for at, d, i in gap_list: by_phase['decode steps' if i > first_decode else 'prompt steps'] += d
    sizes = {f'< {b} µs': sum(d for _, d, _ in gap_list if lo <= d < b)
             for lo, b in ((0, 10), (10, 50), (50, 200), (200, 1000), (1000, 10**9))}
    top = sorted(gap_list, key=lambda g: -g[1])[:15]
    R.update(span_us=span, busy_us=busy, gaps_us=span - busy, gaps_by_phase_us=by_phase, gaps_by_size_us=sizes,
             longest=[dict(at_us=at - ks[0][0], us=d, before=ks[i - 1][2][:60], after=ks[i][2][:60],
                           decode=i > first_decode) for at, d, i in top])
    log(f"wall {wall * 1e3:.1f} ms ({B * N / wall:,.0f} tokens/s); kernels from first to last {span / 1e3:.1f} ms, "
        f"busy {busy / 1e3:.1f} ms ({busy / span:.0%}), {len(ks)} kernels")
    log('gaps by phase (ms): ' + ', '.join(f'{k} {v / 1e3:.1f}' for k, v in by_phase.items()))
    log('gaps by size (ms): ' + ', '.join(f'{k} {v / 1e3:.1f}' for k, v in sizes.items()))
    for g in R['longest']:
        log(f"  {g['us']:8.0f} µs at {g['at_us'] / 1e3:7.1f} ms ({'decode' if g['decode'] else 'prompts'}): "
            f"{g['before']} -> {g['after']}")

run_section(gaps, R, save)
log('done')
