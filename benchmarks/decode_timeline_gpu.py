#!/usr/bin/env python3
"""The kernels of one batch-1 decode step, in the order the GPU ran them: start, duration, grid, and each weight
product's bytes and GB/s, for a random-weight model of a preset (default Qwen3-0.6B, bf16, engine defaults).

Run from the repository root:  PYTHONPATH=.:benchmarks python3 benchmarks/decode_timeline_gpu.py [--preset qwen3-0.6b]
MINILLM_PDL=0 launches plainly, so that each kernel's duration is its own (under PDL a kernel starts while the one
before it runs, and its duration includes the wait); --fused-attention off keeps the rotary kernel, the decode kernel
and the combine (the step before the decode-step chapter). Writes decode_timeline_<preset>[_nopdl][_unfused].json to
$OUT if set, else to benchmarks/results/.
"""
import argparse, json, os, tempfile, time
import torch
from minillm import LLM, SamplingParams
from minillm.loading import random_checkpoint, PRESETS
import minillm.kernels.attention as A
import minillm.kernels.decode as decode
from helpers.bench_io import log, saver

ap = argparse.ArgumentParser()
ap.add_argument('--preset', default='qwen3-0.6b', choices=sorted(PRESETS))
ap.add_argument('--prompt-len', type=int, default=256)
ap.add_argument('--fused-attention', choices=('on', 'off'), default='on', help="the decode-step chapter's one-launch attention")
ap.add_argument('--splits', type=int, default=None, help="splits per KV head of the one-launch attention (default: its choice)")
args = ap.parse_args()
decode.ENABLED, decode.NUM_SPLITS = args.fused_attention == 'on', args.splits
R = dict(preset=args.preset, pdl=A.USE_PDL, fused_attention=decode.ENABLED, splits=args.splits, device=torch.cuda.get_device_name(), torch=torch.__version__)
tag = ('' if A.USE_PDL else '_nopdl') + ('' if decode.ENABLED else '_unfused') + (f'_splits{args.splits}' if args.splits else '')
save = saver(R, f"decode_timeline_{args.preset}{tag}")

ck = random_checkpoint(**PRESETS[args.preset], dtype=torch.bfloat16, device='cuda')
llm = LLM(str(ck), dtype='bfloat16', device='cuda', max_num_seqs=8, max_model_len=4096)
prompt = [torch.randint(0, 151643, (args.prompt_len,), generator=torch.Generator().manual_seed(1)).tolist()]
sp = SamplingParams(temperature=0, max_tokens=64, ignore_eos=True)
llm.generate(prompt, sp, use_tqdm=False)                       # graphs captured, kernels compiled
torch.cuda.synchronize()
t0 = time.perf_counter()
llm.generate(prompt, sp, use_tqdm=False)
torch.cuda.synchronize()
R['tokens_per_s'] = 64 / (time.perf_counter() - t0)

with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
    llm.generate(prompt, sp, use_tqdm=False)
    torch.cuda.synchronize()
path = os.path.join(tempfile.mkdtemp(), 'trace.json')
prof.export_chrome_trace(path)
ks = sorted((e for e in json.load(open(path))['traceEvents'] if e.get('cat') == 'kernel'), key=lambda e: e['ts'])

# Which kernel is the head: it runs once a step and is the longest of those.
names = {}
for e in ks: names.setdefault(e['name'], []).append(e['dur'])
n_steps = sp.max_tokens - 1
per_step = [n for n, d in names.items() if abs(len(d) - n_steps) <= 2]
head = max(per_step, key=lambda n: sum(names[n]) / len(names[n]))
starts = [i for i, e in enumerate(ks) if e['name'] == head]
i0, i1 = starts[len(starts) // 2], starts[len(starts) // 2 + 1]    # one step, in the middle of the decode
step = ks[i0:i1]
t0 = step[0]['ts']
R['head_kernel'], R['step_us'] = head, ks[i1]['ts'] - t0
busy, end = 0.0, float('-inf')
for e in step:
    a, b = e['ts'], e['ts'] + e['dur']
    if b > end: busy, end = busy + b - max(a, end), b
R['busy_us'] = busy
R['kernels'] = [dict(name=e['name'][:80], start_us=round(e['ts'] - t0, 2), dur_us=e['dur'],
                     grid=e.get('args', {}).get('grid')) for e in step]

# Bytes of each weight product, by position in the layer: the layer's kernels repeat once per layer.
cfg = llm.engine.model.config
per_layer = {}
for e in step: per_layer[e['name']] = per_layer.get(e['name'], 0) + 1
L = cfg.num_hidden_layers
layer_names = [n for n, c in per_layer.items() if c % L == 0]
first = next(i for i, e in enumerate(step) if e['name'] in layer_names)
one_layer = [e for e in step[first:] if e['name'] in layer_names][:sum(per_layer[n] // L for n in layer_names)]
R['one_layer'] = [dict(name=e['name'][:80], dur_us=e['dur'], grid=e.get('args', {}).get('grid')) for e in one_layer]
agg = {}
for e in step:
    a = agg.setdefault(e['name'][:80], [0, 0.0])
    a[0] += 1
    a[1] += e['dur']
R['by_kernel'] = {n: dict(count=c, total_us=round(t, 1)) for n, (c, t) in sorted(agg.items(), key=lambda x: -x[1][1])}
save()

log(f"{args.preset} pdl={A.USE_PDL} fused attention={decode.ENABLED}: {R['tokens_per_s']:.0f} tok/s, step {R['step_us']:.0f} us, kernels busy {busy:.0f} us, "
    f"{len(step)} kernels ({len(one_layer)} a layer), head {head[:40]}")
for e in one_layer: log(f"  layer  {e['dur']:7.2f} us  {e['name'][:70]}  grid {e.get('args', {}).get('grid')}")
for n, a in list(R['by_kernel'].items())[:14]: log(f"  step  {a['total_us']:8.1f} us  {a['count']:4}x  {n[:70]}")
