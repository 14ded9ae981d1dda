#!/usr/bin/env python3
"""Where a Qwen3-8B engine's GPU time goes, int8 and bf16 engines, kernels launched plainly (no PDL, so each
kernel's time is its own): minillm.profiling.profile_engine over a 256-token prompt and 32 new tokens, or with
--batch=B over B prompts of 256 tokens and 128 new tokens each (the `minillm bench` batch workload).

Run from the repository root:  PYTHONPATH=.:benchmarks python3 benchmarks/profile_8b_gpu.py [--batch=64]
Writes profile_8b_gpu.json to $OUT if set, else to benchmarks/results/.
"""
import gc, sys
import torch
import minillm.kernels.attention as A
from minillm import LLM, SamplingParams
from minillm.loading import random_checkpoint, PRESETS
from minillm.profiling import profile_engine
from helpers.bench_io import saver             # benchmarks/helpers/bench_io.py

ck = random_checkpoint(**PRESETS['qwen3-8b'], dtype=torch.bfloat16, device='cuda')
B = next((int(a[8:]) for a in sys.argv[1:] if a.startswith('--batch=')), 0)
ps = torch.randint(0, 151643, (max(B, 1), 256), generator=torch.Generator().manual_seed(2)).tolist()
sp = SamplingParams(temperature=0, max_tokens=128 if B else 32, ignore_eos=True)
res = dict(argv=sys.argv)
save = saver(res, 'profile_8b_gpu')
with A.pdl(False):                                      # every kernel plainly: each one's own time
    for q in ('int8', None):
        llm = LLM(str(ck), dtype='bfloat16', device='cuda', quantization=q, max_num_seqs=max(8, B), max_model_len=4096,
                  num_kv_blocks=max(1024, 32 * B))
        llm.generate(ps, SamplingParams(temperature=0, max_tokens=8, ignore_eos=True), use_tqdm=False)
        p = profile_engine(llm, ps, sp, top=20)
        res[q or 'bf16'] = p
        print(q or 'bf16', f"{p['tokens_per_s']:.0f} tok/s steps {p['steps']}")
        for name, ms, n in p['top_ops']: print(f"  {ms / p['steps'] * 1e3:8.1f} us/step {n // p['steps']:5}/step  {name[:90]}")
        del llm
        gc.collect()
        torch.cuda.empty_cache()
save()
