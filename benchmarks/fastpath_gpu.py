"""GPU check of the engine's fast path (Triton attention + CUDA graphs) on random-weight Qwen3-0.6B.
Correctness first (fp32: kernels+graphs == PyTorch path == transformers; bf16 agreement), then tokens/s at
batch 1 and 64 (256-token prompts, 128 new, greedy, EOS ignored) and a per-phase profile of decode steps.
Run: PYTHONPATH=. python3 benchmarks/fastpath_gpu.py [--out results.json]
(benchmarks/results/fastpath_qwen3-0.6b_h200.json predates minillm.profiling: its phases come from an earlier
in-script timer that wrapped execute/graph step/on_token instead of prepare/forward/update.)"""
import json, sys, time
import torch
from transformers import AutoModelForCausalLM
from minillm.engine import LLM
from minillm.sampling import SamplingParams
from minillm.loading import random_checkpoint, PRESETS
from minillm.profiling import profile_engine

def timed(fn):
    torch.cuda.synchronize(); t0 = time.perf_counter(); r = fn(); torch.cuda.synchronize()
    return r, time.perf_counter() - t0

res = {}
g = torch.Generator().manual_seed(0)
# 1. fp32 correctness at real shapes
ck32 = random_checkpoint(**PRESETS['qwen3-0.6b'], dtype=torch.float32, device='cuda')
prompts = [torch.randint(0, 151643, (n,), generator=g).tolist() for n in (5, 64, 200, 17, 300, 1, 90, 33)]
sp32 = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
fast = LLM(str(ck32), dtype='float32', device='cuda', gpu_memory_utilization=0.3)
ref = LLM(str(ck32), dtype='float32', device='cuda', attention_backend='torch', cuda_graphs='off', num_kv_blocks=4096)
a = [o.outputs[0].token_ids for o in fast.generate(prompts, sp32, use_tqdm=False)]
b = [o.outputs[0].token_ids for o in ref.generate(prompts, sp32, use_tqdm=False)]
hf = AutoModelForCausalLM.from_pretrained(ck32, dtype=torch.float32).cuda().eval()
c = [hf.generate(torch.tensor([p], device='cuda'), max_new_tokens=32, min_new_tokens=32, do_sample=False, pad_token_id=0)[0, len(p):].tolist() for p in prompts]
res['fp32_fast_eq_torch'] = sum(x == y for x, y in zip(a, b)); res['fp32_fast_eq_hf'] = sum(x == y for x, y in zip(a, c))
print(f"fp32: fast == torch path {res['fp32_fast_eq_torch']}/8, fast == transformers {res['fp32_fast_eq_hf']}/8", flush=True)
del fast, ref, hf; torch.cuda.empty_cache()

# 2. bf16: speed, agreement, profile
ck = random_checkpoint(**PRESETS['qwen3-0.6b'], dtype=torch.bfloat16, device='cuda')
llm = LLM(str(ck), dtype='bfloat16', device='cuda', gpu_memory_utilization=0.5)
sp = SamplingParams(temperature=0, max_tokens=128, ignore_eos=True)
for B in (1, 64):
    ps = torch.randint(0, 151643, (B, 256), generator=g).tolist()
    llm.generate(ps, SamplingParams(temperature=0, max_tokens=8, ignore_eos=True), use_tqdm=False)   # warm-up
    runs = [timed(lambda: llm.generate(ps, sp, use_tqdm=False)) for _ in range(3)]
    dt = sorted(t for _, t in runs)[1]
    res[f'bs{B}_tok_s'] = B * 128 / dt
    prof = profile_engine(llm, ps, sp)
    res[f'bs{B}_phases'] = prof['phases_ms_per_step']
    print(f"batch {B:3}: {B * 128 / dt:8.0f} tok/s (median of 3); per step (ms, synced): " +
          ', '.join(f"{k} {v:.3f}" for k, v in prof['phases_ms_per_step'].items()) +
          f"; GPU busy {prof['gpu_busy_fraction']:.0%}", flush=True)
    if B == 64:
        outs = runs[0][0]
        hfb = AutoModelForCausalLM.from_pretrained(ck, dtype=torch.bfloat16).cuda().eval()
        r = hfb.generate(torch.tensor(ps, device='cuda'), max_new_tokens=128, min_new_tokens=128, do_sample=False, pad_token_id=0)[:, 256:].tolist()
        same = [next((i for i, (x, y) in enumerate(zip(o.outputs[0].token_ids, t)) if x != y), 128) for o, t in zip(outs, r)]
        res['bf16_identical_seqs'] = sum(s == 128 for s in same); res['bf16_mean_prefix'] = sum(same) / len(same)
        print(f"bf16 vs transformers at 64 x 128: {res['bf16_identical_seqs']}/64 identical, mean identical prefix {res['bf16_mean_prefix']:.1f} tokens")
if '--out' in sys.argv: json.dump(res, open(sys.argv[sys.argv.index('--out') + 1], 'w'), indent=1)
