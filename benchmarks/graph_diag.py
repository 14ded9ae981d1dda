"""Where does a replayed decode step spend its time? Times replay alone, the buffer fill, and lists the top
kernels of one replay with torch.profiler. Run: PYTHONPATH=.:benchmarks python3 benchmarks/graph_diag.py"""
import time, torch
from minillm import LLM, SamplingParams
from minillm.loading import random_checkpoint, PRESETS
from helpers.bench_io import decoding, place                # benchmarks/helpers/bench_io.py
ck = random_checkpoint(**PRESETS['qwen3-0.6b'], dtype=torch.bfloat16, device='cuda')
llm = LLM(str(ck), dtype='bfloat16', device='cuda', gpu_memory_utilization=0.5)
llm.generate([list(range(100, 356))], SamplingParams(temperature=0, max_tokens=8, ignore_eos=True), use_tqdm=False)
eng = llm.engine
G = eng.runner.graphs

def packed_decode(b):
    "A real decode step of `b` sequences, packed where graph ('decode', b) reads it; its request ids."
    ids, sched = decoding(eng, b, 'diag')
    place(eng, eng.runner.pack(sched, eng.block_manager))
    return ids

for b in (1, 64):
    ids = packed_decode(b)
    g = G.graphs[G.key('decode', b)]
    for _ in range(3): g.replay()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(50): g.replay()
    torch.cuda.synchronize()
    print(f"bucket {b}: replay {(time.perf_counter() - t0) / 50 * 1e3:.3f} ms", flush=True)
    eng.abort_request(ids)
from torch.profiler import profile, ProfilerActivity
ids = packed_decode(1)
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    G.graphs[G.key('decode', 1)].replay()
    torch.cuda.synchronize()
eng.abort_request(ids)
print(prof.key_averages().table(sort_by='cuda_time_total', row_limit=12))
