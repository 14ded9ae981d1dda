#!/usr/bin/env python3
"""One engine step that admits a prompt beside 63 decoding sequences (a mixed step, as a server meets whenever a
request arrives), with CUDA graphs off and on (chapter 11 captures mixed steps): wall ms of that step and of the
plain decode step after it, random-weight Qwen3-0.6B in bf16, prompts of 16, 256 and 1,024 tokens.

Run from the repository root:  PYTHONPATH=.:benchmarks python3 benchmarks/mixed_step_gpu.py [--profile]
With --profile, graphs on only: the device time of each kernel in a mixed step and in the decode step after it
(torch.profiler, mean of 6 steps each, a prompt arriving before each: with 64 sequences at most, not every
step can admit one), to see what a mixed step adds. (In runs before the prompts left over were aborted, the
256-token profile measured 16-token prompts.)
Writes mixed_step_gpu.json to $OUT if set, else to benchmarks/results/.
"""
import gc, statistics, sys, time
import torch
from minillm import LLM, SamplingParams
from minillm.loading import random_checkpoint, PRESETS
from minillm.profiling import _device_events, _device_time_us
from helpers.bench_io import log, saver

R = dict(errors={}, rows=[])
save = saver(R, 'mixed_step_gpu')
ck = random_checkpoint(**PRESETS['qwen3-0.6b'], dtype=torch.bfloat16, device='cuda')
g = torch.Generator().manual_seed(0)

def prompt(n: int) -> list: return torch.randint(0, 150000, (n,), generator=g).tolist()

def timed(eng) -> float:
    "Wall ms of one `step()`, its GPU work included."
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    eng.step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3

PROFILE = '--profile' in sys.argv

def kernels(eng, steps: int, add=None) -> dict:
    "µs per step of each kernel over `steps` steps (each after `add()`, if given), from torch.profiler."
    from torch.profiler import profile, ProfilerActivity
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            if add: add()
            eng.step()
        torch.cuda.synchronize()
    ev = sorted(_device_events(prof.key_averages()), key=_device_time_us, reverse=True)
    return {e.key[:90]: round(_device_time_us(e) / steps, 1) for e in ev if _device_time_us(e) > 0}

for graphs in (('on',) if PROFILE else ('off', 'on')):
    t0 = time.perf_counter()
    llm = LLM(str(ck), dtype='bfloat16', max_num_seqs=64, cuda_graphs=graphs, enable_prefix_caching=False)
    eng = llm.engine
    buckets = dict(eng.runner.graphs.buckets) if eng.runner.graphs else {}
    R.setdefault('startup', {})[graphs] = dict(seconds=time.perf_counter() - t0, buckets=buckets,
                                               reserved_gb=torch.cuda.memory_reserved() / 1e9)
    log(graphs, R['startup'][graphs])
    long = SamplingParams(temperature=0, max_tokens=2048, ignore_eos=True)
    one = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True)    # done at its prefill: 63 decodes stay
    for i in range(63): eng.add_request(('decode', i), prompt(256), long)
    while len(eng.scheduler.running) < 63 or any(not s.output_ids for s in eng.scheduler.running): eng.step()
    if PROFILE:
        for r in range(3):
            eng.add_request(('warm', r), prompt(256), one)
            eng.step()
            eng.step()
        R['profile'] = {'decode': kernels(eng, 6)}
        for n in (16, 256):
            k = iter(range(100))
            # a prompt before each step, done at its prefill: the steps that admit one are mixed
            R['profile'][f'mixed {n}'] = kernels(eng, 6, lambda: eng.add_request(('p', n, next(k)), prompt(n), one))
            eng.abort_request([r for r in list(eng.requests) if r[0] == 'p'])   # none left for the next n
        for name, ks in R['profile'].items():
            log(name, f"{sum(ks.values()):.0f} µs a step;", list(ks.items())[:10])
        save()
        break
    for n in (16, 256, 1024):
        mixed, decode = [], []
        before = dict(eng.runner.graphs.replays) if eng.runner.graphs else {}
        for r in range(12):
            eng.add_request(('prompt', n, r), prompt(n), one)
            mixed.append(timed(eng))
            decode.append(timed(eng))
        after = dict(eng.runner.graphs.replays) if eng.runner.graphs else {}
        row = dict(graphs=graphs, prompt_tokens=n, decodes=63, mixed_ms=statistics.median(mixed[2:]),
                   decode_ms=statistics.median(decode[2:]), mixed_all=mixed, decode_all=decode,
                   graph_replays={k: after[k] - before.get(k, 0) for k in after})
        R['rows'].append(row)
        log(row['graphs'], n, f"mixed {row['mixed_ms']:.2f} ms, decode {row['decode_ms']:.2f} ms", row['graph_replays'])
        save()
    eng.abort_request(list(eng.requests))
    del llm, eng
    gc.collect()
    torch.cuda.empty_cache()

if PROFILE: sys.exit()
print(f"\nQwen3-0.6B bf16 on {R['gpu']}: one step with a prompt beside 63 decodes, median of 10 (ms)")
print(f"{'prompt':>7} {'graphs off':>11} {'graphs on':>10} {'decode step, off':>17} {'on':>6}")
by = {(r['graphs'], r['prompt_tokens']): r for r in R['rows']}
for n in (16, 256, 1024):
    off, on = by[('off', n)], by[('on', n)]
    print(f"{n:7} {off['mixed_ms']:11.2f} {on['mixed_ms']:10.2f} {off['decode_ms']:17.2f} {on['decode_ms']:6.2f}")
