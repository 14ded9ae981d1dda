#!/usr/bin/env python3
"""Paged decode attention at 64 x 4096 against SDPA on the dense layout, over cache layouts and tiles.

Run from the repository root:  PYTHONPATH=.:benchmarks python3 benchmarks/decode_layout_gpu.py
For Qwen3-0.6B heads (16 q, 8 kv, head_dim 128) and Qwen2.5-0.5B heads (14 q, 2 kv, 64): block sizes 16 and 32, the
engine's token-major cache [blocks, block_size, Hkv, D] and a head-major one [blocks, Hkv, block_size, D] (handed
to the kernel as a strided view; the kernels take strides), 7 tile configurations, splits auto/1/2.
Writes decode_layout_gpu.json to $OUT if set, else to benchmarks/results/.
"""
import traceback
import torch
import torch.nn.functional as F
from triton.testing import do_bench
import minillm.kernels.attention as A

from helpers.bench_io import log, saver        # benchmarks/helpers/bench_io.py

R = dict(attn=[], errors=[])
save = saver(R, 'decode_layout_gpu')

def main():
    S, T = 64, 4096
    for lname, (hq, hkv, d) in {'qwen3-0.6b': (16, 8, 128), 'qwen2.5-0.5b': (14, 2, 64)}.items():
        q = torch.randn(S, hq, d, device='cuda', dtype=torch.bfloat16)
        cl = torch.full((S,), T, device='cuda', dtype=torch.int32)
        kv_bytes = 2 * S * T * hkv * d * 2
        kd = torch.randn(S, hkv, T, d, device='cuda', dtype=torch.bfloat16)
        vd = torch.randn_like(kd)
        ms = do_bench(lambda: F.scaled_dot_product_attention(q[:, :, None], kd, vd, enable_gqa=True), warmup=25, rep=100, return_mode='median')
        R['attn'].append(dict(layout=lname, impl='sdpa', us=ms * 1e3))
        log(f'{lname} sdpa {ms*1e3:.0f} us')
        del kd, vd
        for bs in (16, 32):
            for head_major in (False, True):
                nb = S * T // bs
                if head_major: kc = torch.randn(nb, hkv, bs, d, device='cuda', dtype=torch.bfloat16).transpose(1, 2)
                else: kc = torch.randn(nb, bs, hkv, d, device='cuda', dtype=torch.bfloat16)
                vc = torch.randn_like(kc)   # randn_like keeps the strides
                bt = torch.randperm(nb, device='cuda', dtype=torch.int32).view(S, T // bs)
                ref = A.paged_decode(q, kc, vc, bt, cl, num_splits=1).float()
                for bn, nw, ns in [(64, 4, 2), (32, 4, 2), (128, 4, 2), (64, 4, 3), (32, 2, 2), (64, 8, 2), (16, 4, 3)]:
                    for sp in (None, 1, 2):
                        try:
                            o = A.paged_decode(q, kc, vc, bt, cl, num_splits=sp, config=dict(block_n=bn, num_warps=nw, num_stages=ns))
                            err = ((o.float() - ref).norm() / ref.norm()).item()
                            assert err < 2e-2, err
                            ms = do_bench(lambda: A.paged_decode(q, kc, vc, bt, cl, num_splits=sp, config=dict(block_n=bn, num_warps=nw, num_stages=ns)), warmup=25, rep=100, return_mode='median')
                        except Exception as e:
                            R['errors'].append(f'attn {lname} {bs} {head_major} {bn} {nw} {ns} {sp}: {type(e).__name__} {str(e)[:200]}')
                            continue
                        R['attn'].append(dict(layout=lname, bs=bs, head_major=head_major, bn=bn, nw=nw, ns=ns, sp=sp, us=ms * 1e3, GBps=kv_bytes / ms / 1e6))
                del kc, vc
                rows = [r for r in R['attn'] if r.get('bs') == bs and r.get('head_major') == head_major and r['layout'] == lname]
                b = sorted(rows, key=lambda r: r['us'])[:3]
                log(f"{lname} bs={bs} head_major={head_major}: " + '; '.join(f"bn={r['bn']} nw={r['nw']} ns={r['ns']} sp={r['sp']} {r['us']:.0f} us" for r in b))
                save()

try: main()
except Exception:
    R['errors'].append(traceback.format_exc())
    log(traceback.format_exc())
save()
log('errors:', R['errors'][:20])
