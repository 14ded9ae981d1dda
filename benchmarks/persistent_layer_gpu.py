#!/usr/bin/env python3
"""Chapter 10d's persistent decoder layer (`persistent_layer`: one launch a layer) against the fused decoder layer it
replaces (`decode_layer`: five launches), for one token of one sequence on random layers of the exact shapes, bf16,
blocks of 16, a 320-token context: the same outputs (and the five-launch form of the kernel bit for bit), a graph of
a whole step's layers replayed many times, then µs a layer of every layer of a step replayed from a CUDA graph, with
the rate that reads the layer's weights at, over tile configurations.

Run from the repository root:  PYTHONPATH=.:benchmarks python3 benchmarks/persistent_layer_gpu.py
Writes persistent_layer_gpu.json to $OUT if set, else to benchmarks/results/.
"""
import torch
from minillm.kernels.gemv import decode_layer
from minillm.kernels import persistent as P
P.ENABLED = True                                   # off by default in the engine
from helpers.bench_io import log, saver, run_section
from helpers.graph_timing import graph_us
from helpers.layer_steps import setup, chain, layer_mb

R = dict(errors={}, correct=[], replay={}, timing=[])
save = saver(R, 'persistent_layer_gpu')
# num_warps, programs a multiprocessor
CONFIGS = [(8, 1), (16, 1)]

def correct():
    for preset in ('qwen3-0.6b', 'qwen2.5-0.5b'):
        m, cfg, caches, attn, cos, sin, x = setup(preset, layers=2)
        snap = [(k.clone(), v.clone()) for k, v in caches]
        with torch.no_grad():
            a = chain(m, P.persistent_layer, x, cos, sin, attn)
            ca = [(k.clone(), v.clone()) for k, v in caches]
            for (k, v), (k0, v0) in zip(caches, snap):
                k.copy_(k0)
                v.copy_(v0)
            b = chain(m, decode_layer, x, cos, sin, attn)
            cb = [(k.clone(), v.clone()) for k, v in caches]
            for (k, v), (k0, v0) in zip(caches, snap):
                k.copy_(k0)
                v.copy_(v0)
            layer = m.model.layers[0]
            kc, vc = caches[0]
            args = (layer, x.reshape(-1), None, cos.reshape(-1, cfg.head_dim)[0],
                    sin.reshape(-1, cfg.head_dim)[0], kc, vc, attn.batch.block_tables[0],
                    attn.batch.context_lens, attn.batch.slot_mapping)
            one = [t.clone() for t in P.layer_step(*args)]
            kc.copy_(snap[0][0])
            vc.copy_(snap[0][1])
            five = P.layer_step(*args, sync=False)
        torch.cuda.synchronize()
        w = P._WORK[next(k for k in P._WORK if k[0].type == 'cuda')]
        r = dict(preset=preset,
                 max_diff_out=(a[0] - b[0]).abs().max().item(), max_diff_res=(a[1] - b[1]).abs().max().item(),
                 out_scale=b[0].abs().max().item(),
                 caches_max_diff=max((p - q).abs().max().item() for s, t in zip(ca, cb) for p, q in zip(s, t)),
                 one_launch_equals_five=all(torch.equal(p, q) for p, q in zip(one, five)),
                 counters_zero=w['bar'].item() == 0 and w['locks'].abs().sum().item() == 0)
        R['correct'].append(r)
        log(r)

def replay():
    "A step's 28 layers in one graph replayed 2,000 times: each replay gives the first one's output (the counters reset)."
    m, cfg, caches, attn, cos, sin, x = setup('qwen3-0.6b')
    g = torch.cuda.CUDAGraph()
    with torch.no_grad():
        st = torch.cuda.Stream()
        st.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(st): chain(m, P.persistent_layer, x, cos, sin, attn)
        torch.cuda.current_stream().wait_stream(st)
        with torch.cuda.graph(g): y = chain(m, P.persistent_layer, x, cos, sin, attn)[0]
    g.replay()
    first = y.clone()
    for _ in range(2000): g.replay()                       # a barrier that never opens hangs here
    torch.cuda.synchronize()
    R['replay'] = dict(replays=2000, equal_to_first=bool(torch.equal(y, first)))
    log(R['replay'])

def timing():
    for preset, layers in (('qwen3-0.6b', None), ('qwen2.5-0.5b', None)):
        m, cfg, caches, attn, cos, sin, x = setup(preset, layers)
        L = cfg.num_hidden_layers
        mb = layer_mb(cfg)
        f = lambda fn: [lambda: chain(m, fn, x, cos, sin, attn)]
        with torch.no_grad():
            five = graph_us(f(decode_layer)) / L
            row = dict(preset=preset, layers=L, weight_mb=mb, five_launch_us=five, five_tb_s=mb / five)
            for cf in CONFIGS:
                P.LAYER_CONFIG = cf
                try: us = graph_us(f(P.persistent_layer)) / L
                except Exception as e:
                    us = None
                    log('config', cf, 'failed', repr(e)[:200])
                row[f'one_launch_us_w{cf[0]}_p{cf[1]}'] = us
            P.LAYER_CONFIG = CONFIGS[0]
        R['timing'].append(row)
        log(row)
        save()

for fn in (correct, replay, timing): run_section(fn, R, save)
log('preset          five-launch µs  best one-launch µs  config  weights GB/s (one launch)')
for r in R['timing']:
    best = min((v, k) for k, v in r.items() if k.startswith('one_launch_us') and v is not None)
    log(f"{r['preset']:14} {r['five_launch_us']:10.2f} {best[0]:14.2f}  {best[1][14:]:10} "
        f"{r['weight_mb'] / best[0]:6.2f} TB/s (five: {r['five_tb_s']:.2f})")
