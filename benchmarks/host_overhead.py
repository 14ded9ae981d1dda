#!/usr/bin/env python3
"""Host (CPU) cost of the engine's bookkeeping, measured without a GPU: the model and kernel launches are replaced by
stand-ins, so what is timed is the Python and PyTorch work around them.

Run from the repository root:  PYTHONPATH=.:benchmarks python3 benchmarks/host_overhead.py
Prints: (1) ms per decode step of a 256, 64 and 1 x 256 -> 128 greedy run through the graph bookkeeping (emulated
graphs, fake logits); (2) ms of one scheduling pass admitting 64 prompts found in the prefix cache;
(3) ms to prepare one eager step of 64 uncached 256-token prompts, and µs to pack one decode step of 1, 64 and 256
rows at position 320; (4) µs per call of the attention and fused-op launchers with the Triton launch stubbed.
The first line printed names the date, the commit (`MINILLM_COMMIT` or git's HEAD) and the CPU.

The stand-ins: the runner's `forward` (an instance attribute on `llm.engine.runner`) returns rows of
`fake`, one per sample row of the batch it is given, so a step still packs its batch, and a decode step
still goes through the emulated graph bank's `replay` (table copy, replay count); the bank's 'prefill'
buckets are emptied so that prompts take the eager path. The engine's `max_num_batched_tokens` is
64 x 256, so that the runner's input buffers (sized from it) hold the 64 x 256-token step of (3).
"""
import os
os.environ.setdefault('TRITON_INTERPRET', '1')
import datetime, platform, time, torch
from minillm import LLM, SamplingParams
from minillm.scheduler import Sequence
from helpers.bench_io import commit
import minillm.kernels.attention as A, minillm.kernels.fused as Fu

def best_of(fn, n=5):
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts)

info = open('/proc/cpuinfo').read() if os.path.exists('/proc/cpuinfo') else ''
cpu = next((l.split(':', 1)[1].strip() for l in info.splitlines() if l.startswith('model name')),
           platform.processor())
print(f"{datetime.date.today()}, commit {commit()}, {cpu}, torch {torch.__version__}")
fake = torch.randn(256, 16)                               # logits of a 16-token vocabulary: sampling costs ~nothing
llm = LLM('tiny-qwen3', cuda_graphs='emulate', dtype='float32', max_num_batched_tokens=64 * 256)
eng = llm.engine
eng.runner.forward = lambda batch: fake[:batch.sample_rows.shape[0]]   # the model: logits of the sample rows
eng.runner.graphs.buckets['prefill'] = []                 # no prefill bucket fits: prompts go the eager way
sp = SamplingParams(max_tokens=128, ignore_eos=True, temperature=0)
for B in (256, 64, 1):
    prompts = [[(i * 7 + j) % 1000 + 10 for j in range(256)] for i in range(B)]
    llm.generate(prompts, sp, use_tqdm=False)
    if B == 64: prompts64 = prompts                       # now in the prefix cache
    print(f"decode bookkeeping, batch {B:3}: {best_of(lambda: llm.generate(prompts, sp, use_tqdm=False)) / 128 * 1e3:.3f} ms per step")

r, bm, sched = eng.runner, eng.block_manager, eng.scheduler
def admit():                                              # one scheduling pass admitting 64 prompts the cache holds
    seqs = [Sequence(10**7 + i, list(p), sp) for i, p in enumerate(prompts64)]
    for s in seqs: sched.add(s)
    t0 = time.perf_counter()
    sched.schedule()
    dt = time.perf_counter() - t0
    for s in seqs: sched.finish(s, 'abort')
    return dt
print(f"admission of 64 cached 256-token prompts: {min(admit() for _ in range(5)) * 1e3:.2f} ms")
seqs = [Sequence(10**6 + i, [(i * 13 + j) % 5000 for j in range(256)], sp) for i in range(64)]
for s in seqs: bm.allocate(s.seq_id, s.token_ids, 256)
pack = lambda: r.pack([(s, 256) for s in seqs], bm)
print(f"eager step inputs, 64 x 256 tokens: {best_of(pack) * 1e3:.2f} ms")
for s in seqs: bm.free(s.seq_id)
for B in (1, 64, 256):                                    # a decode step: one new token of each sequence
    seqs = [Sequence(2 * 10**6 + i, [(i * 13 + j) % 5000 for j in range(320)], sp) for i in range(B)]
    for s in seqs:
        bm.allocate(s.seq_id, s.token_ids, 320)
        s.num_computed = 319
    step = [(s, 1) for s in seqs]
    print(f"decode step inputs, {B:3} rows at position 320: {best_of(lambda: r.pack(step, bm)) * 1e6:.0f} µs")
    for s in seqs: bm.free(s.seq_id)

class Stub:                                               # `kernel[grid](...)` that launches nothing
    def __getitem__(self, grid): return lambda *a, **k: None
for name in ('_prefill_kernel', '_store_kv_kernel'): setattr(A, name, Stub())
for name in ('_rmsnorm_kernel', '_qk_rope_kernel', '_silu_mul_kernel'): setattr(Fu, name, Stub())
N, Hq, Hkv, D = 1024, 16, 8, 128
q, k, v = torch.randn(N, Hq, D), torch.randn(N, Hkv, D), torch.randn(N, Hkv, D)
kc = torch.zeros(512, 16, Hkv, D)
vc = torch.zeros_like(kc)
bt = (torch.arange(64 * 16, dtype=torch.int32) % 512).view(64, 16)
cl, qsl = torch.full((64,), 16, dtype=torch.int32), torch.arange(65, dtype=torch.int32) * 16
x, w, cos, sin, gu, qw = torch.randn(N, 1024), torch.ones(1024), torch.randn(N, D), torch.randn(N, D), torch.randn(N, 6144), torch.ones(D)
for name, f in [('store_kv', lambda: A.store_kv(k, v, kc, vc, torch.arange(N))),
                ('paged_attention (prefill)', lambda: A.paged_attention(q, kc, vc, bt, cl, qsl, 16)),
                ('rms_norm with residual', lambda: Fu.rms_norm(x, w, 1e-6, x)),
                ('qk_norm_rope', lambda: Fu.qk_norm_rope(q, k, qw, qw, cos, sin, 1e-6)),
                ('silu_mul', lambda: Fu.silu_mul(gu))]:
    print(f"launcher {name:26} {best_of(lambda: [f() for _ in range(1000)]) * 1e3:6.1f} µs per call")
