#!/usr/bin/env python3
"""The paged decode kernel with its programs ordered (KV head, sequence), so that the KV heads of one sequence run
side by side and read the same blocks, against a build before, which ordered them (sequence, KV head); and, tried
beside them, 32 KB key tiles in three pipeline stages instead of 16 KB in two. Steps the engine runs unsplit (33
sequences or more on Qwen3's 8 KV heads): from the nano-vllm workload (its prompts and outputs, at output token t),
the batch workloads, a long-context batch and Qwen2.5-0.5B's heads. Each is checked against attention computed in
fp32 by PyTorch, then timed from a CUDA graph; bandwidth counts the keys and values read.

Run from the repository root, with the build before unpacked beside:
  mkdir -p /tmp/before && git archive 701beb8 minillm | tar -x -C /tmp/before
  PYTHONPATH=.:benchmarks python3 benchmarks/decode_order_gpu.py --before /tmp/before
Writes decode_order_gpu.json to $OUT if set, else to benchmarks/results/.
"""
import argparse, importlib.util, sys, torch
from pathlib import Path
from triton.testing import do_bench_cudagraph
from minillm.kernels.attention import paged_decode, decode_config
from minillm.workloads import nanovllm_workload, request_lengths
from helpers.bench_io import log, saver
from helpers.paged_steps import paged_step, reference

ap = argparse.ArgumentParser()
ap.add_argument('--before', required=True, help="a folder holding the earlier build's minillm package")
args = ap.parse_args()

def load_before(folder):
    "The earlier build's package, imported as `minillm_before`."
    spec = importlib.util.spec_from_file_location('minillm_before', Path(folder) / 'minillm' / '__init__.py',
                                                  submodule_search_locations=[str(Path(folder) / 'minillm')])
    mod = sys.modules['minillm_before'] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return importlib.import_module('minillm_before.kernels.attention')

before = load_before(args.before)
R = dict(errors={}, rows=[], before=args.before)
save = saver(R, 'decode_order_gpu')
TRIED = dict(block_n=128, num_warps=4, num_stages=3)
plens, olens = request_lengths(nanovllm_workload())
steps = [(f'nano-vllm t={t}', [p + t for p, o in zip(plens, olens) if o > t]) for t in (50, 300, 600, 900)]
steps += [('batch 64, ctx 320', [320] * 64), ('batch 256, ctx 320', [320] * 256), ('64 x 4096', [4096] * 64)]
g = torch.Generator('cuda').manual_seed(0)

def step(name, ctxs, hq=16, hkv=8, d=128):
    q, kc, vc, bt, lens = paged_step(ctxs, hq, hkv, d, generator=g)
    S = len(ctxs)
    ref, row = reference(q, kc, vc, bt, lens), dict(step=name, S=S, heads=(hq, hkv, d), ctx_mean=sum(ctxs) / S)
    gb = sum(ctxs) * hkv * d * 2 * kc.element_size() / 1e9
    cfg = decode_config(q)
    # the earlier build has no `config` argument: its launcher takes the same tiles
    runs = dict(now=lambda o: paged_decode(q, kc, vc, bt, lens, out=o, num_splits=1, config=cfg),
                before=lambda o: before._launch_decode(q, kc, vc, bt, lens, None, o, 1, **cfg),
                tiles_tried=lambda o: paged_decode(q, kc, vc, bt, lens, out=o, num_splits=1, config=TRIED))
    outs = {k: torch.empty_like(q) for k in runs}
    for k, run in runs.items(): run(outs[k])
    torch.cuda.synchronize()
    times = {k: [] for k in runs}
    # three rounds, taking turns; the median
    for _ in range(3):
        for k, run in runs.items(): times[k].append(do_bench_cudagraph(lambda: run(outs[k]), rep=30) * 1e3)
    for k in runs:
        us = sorted(times[k])[1]
        row[k] = dict(us=us, tb_per_s=gb / us * 1e3, max_err=(outs[k].float() - ref.float()).abs().max().item())
    row['config'], row['tiles_tried_config'] = cfg, TRIED
    row['speedup'] = row['before']['us'] / row['now']['us']
    R['rows'].append(row)
    log(f"{name:22} S {S:3}: " + ", ".join(f"{k} {row[k]['us']:6.1f} µs ({row[k]['tb_per_s']:.2f} TB/s, "
                                            f"error {row[k]['max_err']:.0e})" for k in runs)
        + f"; now/before {row['speedup']:.3f}x")
    save()

for name, ctxs in steps: step(name, ctxs)
step('Qwen2.5-0.5B t=300', steps[1][1], hq=14, hkv=2, d=64)
tot = {k: sum(r[k]['us'] for r in R['rows'][:4]) for k in ('now', 'before', 'tiles_tried')}
R['nano_vllm_steps_us'] = tot
log("the four nano-vllm steps: " + ", ".join(f"{k} {v:.1f} µs" for k, v in tot.items()))
save()
