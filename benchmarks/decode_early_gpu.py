#!/usr/bin/env python3
"""The batch-1 decoder layer with what its kernels can read before their PDL wait read there: the decode attention's
context length, block table and first tile of cached keys and values (chapter 10c), and the first two
chunks of the up rows beside the gate rows in the gate/up GEMV (chapter 10b). Random layers of the exact shapes, bf16,
blocks of 16:

- same: graphed under PDL, a step's outputs and caches equal, bit for bit, those of eager plain launches;
- replay: a whole step's layers in one graph, replayed 2,000 times, give the first replay's output every time;
- timing: µs a layer of a whole step's layers replayed from one graph, at several contexts.

Run on this tree, then on the build before with its `minillm` first on `PYTHONPATH`; each run writes
decode_early_gpu_<label>.json to $OUT if set, else to benchmarks/results/:
  PYTHONPATH=.:benchmarks python3 benchmarks/decode_early_gpu.py --label this
"""
import argparse
import torch
import minillm.kernels.attention as A
from minillm.cuda_graphs import capture_graph
from minillm.kernels.gemv import decode_layer
from helpers.bench_io import log, saver, run_section
from helpers.graph_timing import graph_us
from helpers.layer_steps import setup, chain, layer_mb

ap = argparse.ArgumentParser()
ap.add_argument('--label', default='this', help="names the result file: decode_early_gpu_<label>.json")
args = ap.parse_args()
R = dict(label=args.label, errors={}, same=[], replay={}, timing=[])
save = saver(R, f'decode_early_gpu_{args.label}')
step = lambda m, x, cos, sin, attn: lambda: chain(m, decode_layer, x, cos, sin, attn)

def same():
    "PDL in a graph against plain eager launches: outputs and caches bit for bit (a step stores the same K/V again)."
    for preset in ('qwen3-0.6b', 'qwen2.5-0.5b'):
        for ctx in (1, 17, 320, 1000):
            m, cfg, caches, attn, cos, sin, x = setup(preset, layers=2, ctx=ctx)
            with torch.no_grad():
                with A.pdl(False):
                    ref = [t.clone() for t in step(m, x, cos, sin, attn)()]
                    ref_caches = [t.clone() for c in caches for t in c]
                g, out = capture_graph(step(m, x, cos, sin, attn))
                g.replay()
            torch.cuda.synchronize()
            r = dict(preset=preset, ctx=ctx, out_equal=all(torch.equal(a, b) for a, b in zip(out, ref)),
                     caches_equal=all(torch.equal(a, b)
                                      for a, b in zip([t for c in caches for t in c], ref_caches)))
            R['same'].append(r)
            log(r)

def replay():
    "A step's 28 layers in one graph replayed 2,000 times: each replay gives the first one's output."
    m, cfg, caches, attn, cos, sin, x = setup('qwen3-0.6b')
    with torch.no_grad(): g, out = capture_graph(step(m, x, cos, sin, attn))
    g.replay()
    first = out[0].clone()
    equal = 0
    for _ in range(2000):
        g.replay()
        equal += int(torch.equal(out[0], first))
    R['replay'] = dict(replays=2000, equal_to_first=equal)
    log(R['replay'])

def timing():
    for preset, ctx in (('qwen3-0.6b', 320), ('qwen3-0.6b', 1024), ('qwen3-0.6b', 4096),
                        ('qwen2.5-0.5b', 320)):
        m, cfg, caches, attn, cos, sin, x = setup(preset, ctx=ctx)
        L, mb = cfg.num_hidden_layers, layer_mb(cfg)
        with torch.no_grad(): us = graph_us([step(m, x, cos, sin, attn)], rep=200) / L
        row = dict(preset=preset, ctx=ctx, layers=L, weight_mb=mb, us_per_layer=us, weight_tb_s=mb / us)
        R['timing'].append(row)
        log(row)
        save()
        del m, caches

for fn in (same, replay, timing): run_section(fn, R, save)
print(f"\n{args.label}: µs a layer, a step's layers replayed from one graph")
for r in R['timing']: print(f"{r['preset']:13} context {r['ctx']:5}: {r['us_per_layer']:6.2f} µs")
