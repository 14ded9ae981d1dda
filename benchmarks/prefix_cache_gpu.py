#!/usr/bin/env python3
"""The prefix cache's speedup against the length of the shared prefix: 32 requests that share their first
`prefix` tokens, each with 64 tokens of its own, generating 1 token (the prefill alone) or 128, with prefix caching
off and on. Before each timed run one request with the same prefix has run (as a system prompt has, once a server
is warm): requests admitted in the same step cannot share what none of them has computed yet. Random-weight Qwen3-0.6B in bf16; every run draws fresh tokens, so no run hits an earlier one's
blocks; the median of 3 runs after a warm-up.

Run from the repository root:  PYTHONPATH=.:benchmarks python3 benchmarks/prefix_cache_gpu.py
Writes prefix_cache_gpu.json to $OUT if set, else to benchmarks/results/.
"""
import gc, statistics, time
import torch
from minillm import LLM, SamplingParams
from minillm.loading import random_checkpoint, PRESETS
from minillm.workloads import prefix_workload, make_requests
from helpers.bench_io import log, saver

PREFIXES, OUTPUTS, REPEATS = (128, 512, 1024, 2048, 4096), (1, 128), 3
R = dict(errors={}, rows=[], requests=32, suffix=64, repeats=REPEATS)
save = saver(R, 'prefix_cache_gpu')
ck = random_checkpoint(**PRESETS['qwen3-0.6b'], dtype=torch.bfloat16, device='cuda')

fresh = iter(range(1, 10**6))                                             # a new variant for every run

def run(llm, spec) -> tuple:
    "Seconds of one `generate` of fresh requests of the workload, and the prompt tokens served from the cache."
    prompts, outs = make_requests(spec, next(fresh))
    llm.generate([prompts[0]], SamplingParams(max_tokens=1), use_tqdm=False)  # the prefix seen once, untimed
    sps = [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True) for n in outs]
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    res = llm.generate(prompts, sps, use_tqdm=False)
    torch.cuda.synchronize()
    return time.perf_counter() - t0, sum(r.metrics.num_cached_tokens for r in res)

for caching in (False, True):
    llm = LLM(str(ck), dtype='bfloat16', enable_prefix_caching=caching)
    for out in OUTPUTS:
        for p in PREFIXES:
            spec = prefix_workload(R['requests'], prefix_len=p, suffix_len=R['suffix'], output_len=out)
            run(llm, spec)                                            # warm-up: compiles, graphs
            times, cached = zip(*(run(llm, spec) for _ in range(REPEATS)))
            row = dict(caching=caching, prefix=p, output=out, seconds=statistics.median(times), times=times,
                       cached_tokens=cached[0], prompt_tokens=R['requests'] * (p + R['suffix']))
            R['rows'].append(row)
            log(f"caching={caching} prefix={p} out={out}: {row['seconds'] * 1e3:.1f} ms, cached {cached}")
            save()
    del llm
    gc.collect()
    torch.cuda.empty_cache()

by = {(r['caching'], r['prefix'], r['output']): r for r in R['rows']}
R['speedup'] = {f"{p}/{o}": by[(False, p, o)]['seconds'] / by[(True, p, o)]['seconds'] for p in PREFIXES for o in OUTPUTS}
save()
print(f"\nQwen3-0.6B bf16 on {R['gpu']}: 32 requests sharing a prefix, 64 tokens each of their own (ms, median of 3)")
print(f"{'prefix':>7} {'out':>4} {'off':>8} {'on':>8} {'speedup':>8} {'cached':>8}")
for o in OUTPUTS:
    for p in PREFIXES:
        off, on = by[(False, p, o)], by[(True, p, o)]
        print(f"{p:>7} {o:>4} {off['seconds'] * 1e3:8.1f} {on['seconds'] * 1e3:8.1f} "
              f"{off['seconds'] / on['seconds']:7.2f}x {on['cached_tokens'] / on['prompt_tokens']:7.0%}")
