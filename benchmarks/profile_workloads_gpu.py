#!/usr/bin/env python3
"""Where the engine's time goes on the throughput workloads (chapter 15a): `minillm.profiling.profile_engine` on
random-weight Qwen3-0.6B (bf16, engine defaults but prefix caching off, since the profile repeats its prompts) for
256 requests of 256 -> 128 greedy tokens, and nano-vllm's bench.py workload sampled (temperature 0.6) and greedy:
host time per phase, GPU-busy fraction, top device kernels.

Run from the repository root:  PYTHONPATH=.:benchmarks python3 benchmarks/profile_workloads_gpu.py
Writes profile_workloads_gpu.json to $OUT if set, else to benchmarks/results/.
"""
import torch
from minillm import LLM, SamplingParams
from minillm.loading import random_checkpoint, PRESETS
from minillm.profiling import profile_engine, print_profile
from minillm.workloads import nanovllm_workload, make_requests
from helpers.bench_io import log, saver, run_section

R = dict(errors={}, profile={})
save = saver(R, 'profile_workloads_gpu')

def profiles():
    ck = random_checkpoint(**PRESETS['qwen3-0.6b'], dtype=torch.bfloat16, device='cuda')
    llm = LLM(str(ck), dtype='bfloat16', device='cuda', enable_prefix_caching=False)   # repeated prompts: no hits
    ps = torch.randint(0, 151643, (256, 256), generator=torch.Generator().manual_seed(0)).tolist()
    sp = lambda t, n: SamplingParams(temperature=t, max_tokens=n, ignore_eos=True)
    runs = [('batch 256 x 256 -> 128 greedy', ps, [sp(0, 128)] * 256)]
    for t in (0.6, 0.0):
        prompts, outs = make_requests(nanovllm_workload(temperature=t))
        runs.append((f'nanovllm temperature {t}', prompts, [sp(t, n) for n in outs]))
    for name, prompts, sps in runs:
        llm.generate(prompts, sps, use_tqdm=False)                      # warm-up at the timed shapes
        p = profile_engine(llm, prompts, sps, top=25)
        log('---', name)
        print_profile(p)
        R['profile'][name] = p
        save()

run_section(profiles, R, save)
log('done')
