#!/usr/bin/env python3
"""Where the batch-1 decode attention's time goes: chapter 10c's one-launch kernel (`rope_decode`) beside variants of it
that leave one stage out (the combine, the q/k norm and rotary) or do a stage another way (the scores and the
weighted values on CUDA cores instead of `tl.dot`, whose 16-row tiles hold 2 real rows for Qwen3-0.6B; the combine's
loads in one round trip; splits without keys leaving at once), then the best in the whole batch-1 layer.

- check: each complete variant against `rope_decode` on random caches (outputs, caches bit for bit);
- chain: 28 launches of one variant captured back to back in a graph under PDL, µs a launch, S = 1;
- layer: the batch-1 decoder layer (chapter 10b's `decode_layer`) with the variant as its attention, µs a layer.

Run from the repository root:  PYTHONPATH=.:benchmarks python3 benchmarks/decode_ladder_gpu.py
Writes decode_ladder_gpu.json to $OUT if set, else to benchmarks/results/.
"""
import torch, triton
import triton.language as tl
import minillm.kernels.decode as DEC
from minillm.kernels.attention import (pdl_options, gdc_launch_dependents, gdc_wait, _online, _attend, _tile, _new_key,
                                       _prec, decode_config, _split_partials)
from minillm.kernels.decode import (_rope_decode_early, _norm_rope, _check_rope_decode, _locks,
                                    rope_decode)
from helpers.bench_io import log, saver, run_section

@triton.jit
def _step_cc(acc, m_i, l_i, q, kv, k, v, n, hi, qk_scale, G: tl.constexpr, BH: tl.constexpr):
    "One tile's online-softmax step of the G heads of `q` `[BH, D]` on CUDA cores (fp32 products and sums)."
    offs_g = tl.arange(0, BH)
    kf, vf = k.to(tl.float32), v.to(tl.float32)
    ok = (kv < n) & (kv < hi)
    for g in tl.static_range(G):
        sel = offs_g == g
        qg = tl.sum(tl.where(sel[:, None], q, 0.), 0)                          # [D]
        s = tl.where(ok, tl.sum(qg[None, :] * kf, 1) * qk_scale, float('-inf'))  # [BLOCK_N]
        m_old = tl.max(tl.where(sel, m_i, float('-inf')), 0)
        m_new = tl.maximum(m_old, tl.max(s, 0))
        m_use = tl.where(m_new == float('-inf'), 0.0, m_new)
        p = tl.math.exp2(s - m_use).to(k.dtype).to(tl.float32)
        alpha = tl.math.exp2(m_old - m_use)
        l_new = tl.sum(tl.where(sel, l_i, 0.), 0) * alpha + tl.sum(p, 0)
        pv = tl.sum(p[:, None] * vf, 0)                                        # [D]
        acc = tl.where(sel[:, None], acc * alpha + pv[None, :], acc)
        m_i, l_i = tl.where(sel, m_new, m_i), tl.where(sel, l_new, l_i)
    return acc, m_i, l_i

@triton.jit(do_not_specialize=['s_bt'])
def _cand_kernel(x_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr, k_ptr, v_ptr, bt_ptr, ctx_ptr, slot_ptr, out_ptr,
                 po_ptr, plse_ptr, lock_ptr, qk_scale, eps, s_x, s_c, s_kb, s_kt, s_kh, s_vb, s_vt, s_vh,
                 s_bt, s_os, s_oh, HQ: tl.constexpr, HKV: tl.constexpr, G: tl.constexpr,
                 BH: tl.constexpr, D: tl.constexpr, BS: tl.constexpr, BLOCK_N: tl.constexpr,
                 SPLITS: tl.constexpr, SP: tl.constexpr, NORM: tl.constexpr, PREC: tl.constexpr,
                 PDL: tl.constexpr, DOT: tl.constexpr, ROPE: tl.constexpr, COMB: tl.constexpr,
                 EXIT: tl.constexpr):
    if PDL: gdc_launch_dependents()
    s, kvh, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    ctx, n, lo, hi, kv0, k0, v0 = _rope_decode_early(s, kvh, split, k_ptr, v_ptr, bt_ptr, ctx_ptr, s_kb,
                                                     s_kt, s_kh, s_vb, s_vt, s_vh, s_bt, D, BS, BLOCK_N,
                                                     SPLITS)
    per = tl.cdiv(tl.cdiv(n, BLOCK_N), SPLITS) * BLOCK_N
    # splits that hold keys (split 0 always: it stores the new key)
    ns = tl.maximum(tl.cdiv(n, tl.maximum(per, 1)), 1) if EXIT else SPLITS
    if split < ns:
        if PDL: gdc_wait()
        offs_h, offs_d = tl.arange(0, BH), tl.arange(0, D)
        hmask = offs_h < G
        heads = tl.where(hmask, kvh * G + offs_h, -1)
        xs = x_ptr + s.to(tl.int64) * s_x
        half = tl.arange(0, D // 2)[None, :]
        c1, c2 = tl.load(cos_ptr + s * s_c + half), tl.load(cos_ptr + s * s_c + D // 2 + half)
        s1, s2 = tl.load(sin_ptr + s * s_c + half), tl.load(sin_ptr + s * s_c + D // 2 + half)
        if ROPE:
            q = _norm_rope(xs, heads[:, None], qw_ptr, c1, c2, s1, s2, eps, BH, D, NORM)
        else:
            q = tl.load(xs + heads[:, None] * D + offs_d[None, :], mask=hmask[:, None], other=0.)
        acc = tl.zeros([BH, D], dtype=tl.float32)
        m_i = tl.full([BH], float('-inf'), tl.float32)
        l_i = tl.zeros([BH], dtype=tl.float32)
        bt, kp, vp = bt_ptr + s.to(tl.int64) * s_bt, k_ptr + kvh * s_kh, v_ptr + kvh * s_vh
        if DOT:
            pos = tl.zeros([BH], dtype=tl.int32) + n
            acc, m_i, l_i = _online(acc, m_i, l_i, q, kv0, k0, v0, pos, hi, qk_scale, True, PREC)
            acc, m_i, l_i = _attend(acc, m_i, l_i, q, pos, kp, vp, bt, lo + BLOCK_N, hi, qk_scale, s_kb,
                                    s_kt, s_vb, s_vt, BS, BLOCK_N, D, True, PREC)
        else:
            qf = q.to(tl.float32)
            acc, m_i, l_i = _step_cc(acc, m_i, l_i, qf, kv0, k0, v0, n, hi, qk_scale, G, BH)
            for start in range(lo + BLOCK_N, hi, BLOCK_N):
                kv, k, v = _tile(kp, vp, bt, start, hi, s_kb, s_kt, s_vb, s_vt, BS, BLOCK_N, D, True)
                acc, m_i, l_i = _step_cc(acc, m_i, l_i, qf, kv, k, v, n, hi, qk_scale, G, BH)
        if split == 0:       # the new token's key: normed, rotated, stored; one more softmax step
            one = tl.where(offs_h == 0, HQ + kvh, -1)[:, None]
            if ROPE:
                kr = _norm_rope(xs, one, kw_ptr, c1, c2, s1, s2, eps, BH, D, NORM)
            else:
                kr = tl.load(xs + one * D + offs_d[None, :], mask=one >= 0, other=0.)
            kn = tl.sum(tl.where(offs_h[:, None] == 0, kr, 0.), 0).to(q.dtype)
            vn = tl.load(xs + (HQ + HKV + kvh) * D + offs_d)
            slot = tl.load(slot_ptr + s).to(tl.int64)
            acc, m_i, l_i = _new_key(acc, m_i, l_i, q, kn, vn, k_ptr, v_ptr, kvh, slot, ctx, qk_scale, s_kb,
                                     s_kt, s_kh, s_vb, s_vt, s_vh, BS, D)
        l_safe = tl.where(l_i == 0.0, 1.0, l_i)
        o = acc / l_safe[:, None]
        optrs = out_ptr + s * s_os + heads[:, None] * s_oh + offs_d[None, :]
        base = (s * HQ + heads) * SPLITS
        if ns == 1:
            tl.store(optrs, o.to(out_ptr.dtype.element_ty), mask=hmask[:, None])
        else:
            tl.store(po_ptr + (base + split)[:, None] * D + offs_d[None, :], o, mask=hmask[:, None])
            tl.store(plse_ptr + base + split,
                     tl.where(l_i == 0.0, float('-inf'), m_i + tl.math.log2(l_safe)), mask=hmask)
            if COMB > 0:
                tl.debug_barrier()
                done = tl.atomic_add(lock_ptr + s * HKV + kvh, 1, sem='acq_rel')
                if done == ns - 1:
                    tl.debug_barrier()
                    if COMB == 1:    # as rope_decode: the maxima, then the weighted sum
                        m = tl.full([BH], float('-inf'), tl.float32)
                        for j in tl.static_range(SPLITS):
                            m = tl.maximum(m, tl.load(plse_ptr + base + j, mask=hmask & (offs_h * 0 + j < ns),
                                                      other=float('-inf'), cache_modifier='.cg'))
                        m = tl.where(m == float('-inf'), 0.0, m)
                        tot, o = tl.zeros([BH], dtype=tl.float32), tl.zeros([BH, D], dtype=tl.float32)
                        for j in tl.static_range(SPLITS):
                            w = tl.math.exp2(tl.load(plse_ptr + base + j, mask=hmask & (offs_h * 0 + j < ns),
                                                     other=float('-inf'), cache_modifier='.cg') - m)
                            tot += w
                            o += w[:, None] * tl.load(po_ptr + (base + j)[:, None] * D + offs_d[None, :],
                                                      mask=(hmask & (offs_h * 0 + j < ns))[:, None], other=0.,
                                                      cache_modifier='.cg')
                    else:            # every partial in one round trip
                        offs_s = tl.arange(0, SP)
                        ms = hmask[:, None] & (offs_s < ns)[None, :]                   # [BH, SP]
                        idx = base[:, None] + offs_s[None, :]
                        lse = tl.load(plse_ptr + idx, mask=ms, other=float('-inf'), cache_modifier='.cg')
                        po = tl.load(po_ptr + idx[:, :, None] * D + offs_d[None, None, :],
                                     mask=ms[:, :, None], other=0., cache_modifier='.cg')  # [BH, SP, D]
                        m = tl.max(lse, 1)
                        w = tl.math.exp2(lse - tl.where(m == float('-inf'), 0.0, m)[:, None])
                        tot = tl.sum(w, 1)
                        o = tl.sum(w[:, :, None] * po, 1)
                    tl.store(optrs,
                             (o / tl.where(tot == 0.0, 1.0, tot)[:, None]).to(out_ptr.dtype.element_ty),
                             mask=hmask[:, None])
                    tl.atomic_xchg(lock_ptr + s * HKV + kvh, 0)

def cand(dot=True, rope=True, comb=1, exit=False, warps=None, block_n=None, splits=None):
    "A `rope_decode` of the variant given."
    def f(qkv, q_weight, k_weight, cos, sin, eps, k_cache, v_cache, block_tables, context_lens,
          slot_mapping, num_heads, out=None, scale=None, num_splits=None):
        out, q_view, c2, s2 = _check_rope_decode(qkv, cos, sin, k_cache, v_cache, block_tables,
                                                 context_lens, slot_mapping, num_heads, out)
        nb, bs, hkv, d = k_cache.shape
        S, hq = qkv.shape[0], num_heads
        cfg = decode_config(q_view)
        nsp, po, plse = _split_partials(splits or num_splits, out, hkv)
        norm, g = q_weight is not None, hq // hkv
        sc = (d ** -0.5 if scale is None else scale) * 1.4426950408889634
        _cand_kernel[(S, hkv, nsp)](
            qkv, q_weight if norm else qkv, k_weight if norm else qkv, c2, s2, k_cache, v_cache,
            block_tables, context_lens, slot_mapping, out, po, plse, _locks(qkv.device, S * hkv), sc, eps,
            qkv.stride(0), c2.stride(0), *k_cache.stride()[:3], *v_cache.stride()[:3],
            block_tables.stride(0), out.stride(0), out.stride(1), HQ=hq, HKV=hkv, G=g,
            BH=max(16, triton.next_power_of_2(g)) if dot else triton.next_power_of_2(g), D=d, BS=bs,
            BLOCK_N=block_n or cfg['block_n'], SPLITS=nsp, SP=triton.next_power_of_2(nsp), NORM=norm,
            PREC=_prec(qkv.dtype), DOT=dot, ROPE=rope, COMB=comb if nsp > 1 else 0, EXIT=exit,
            num_warps=warps or cfg['num_warps'], num_stages=cfg['num_stages'], **pdl_options(qkv))
        return out
    return f

COMPLETE = {'dot, combine in two passes (= rope_decode)': cand(),
            'cuda cores': cand(dot=False),
            'cuda cores, one-trip combine': cand(dot=False, comb=2),
            'cuda cores, one-trip combine, empty splits exit': cand(dot=False, comb=2, exit=True),
            'dot, one-trip combine, empty splits exit': cand(comb=1, exit=True),
            'cuda cores, one-trip, exit, 8 warps': cand(dot=False, comb=2, exit=True, warps=8),
            'cuda cores, one-trip, exit, 32-key tiles': cand(dot=False, comb=2, exit=True, block_n=32),
            'cuda cores, one-trip, exit, 8 splits': cand(dot=False, comb=2, exit=True, splits=8)}
PARTIAL = {'dot, no combine': cand(comb=0), 'dot, no norm/rotary': cand(rope=False),
           'dot, neither': cand(comb=0, rope=False), 'cuda cores, no combine': cand(dot=False, comb=0)}

def inputs(S, hq, hkv, d, ctx, dt, dev='cuda', bs=16, seed=0):
    from minillm.layers import RotaryEmbedding
    g = torch.Generator(dev).manual_seed(seed)
    w = -(-max(ctx) // bs)
    kc = torch.randn(S * w + 1, bs, hkv, d, dtype=dt, device=dev, generator=g)
    vc = torch.randn(kc.shape, dtype=dt, device=dev, generator=g)
    bt = torch.randperm(S * w, device=dev, generator=g).view(S, w).int()
    lens = torch.tensor(ctx, dtype=torch.int32, device=dev)
    slot = (bt[torch.arange(S, device=dev), (lens - 1) // bs] * bs + (lens - 1) % bs).int()
    qkv = torch.randn(S, (hq + 2 * hkv) * d, dtype=dt, device=dev, generator=g)
    qw, kw = (torch.rand(d, dtype=dt, device=dev, generator=g) + 0.5 for _ in range(2))
    rot = RotaryEmbedding(d, 1e6, 8192).build(dev)
    cos, sin = rot.cos[lens.long() - 1].to(dt), rot.sin[lens.long() - 1].to(dt)
    return qkv, qw, kw, cos, sin, kc, vc, bt, lens, slot

def check_one(f, S, hq, hkv, d, ctx, dt, dev):
    qkv, qw, kw, cos, sin, kc, vc, bt, lens, slot = inputs(S, hq, hkv, d, ctx, dt, dev)
    kc2, vc2 = kc.clone(), vc.clone()
    ref = rope_decode(qkv, qw, kw, cos, sin, 1e-6, kc, vc, bt, lens, slot, hq)
    out = torch.full_like(ref, float('nan'))
    f(qkv, qw, kw, cos, sin, 1e-6, kc2, vc2, bt, lens, slot, hq, out=out)
    same = bool(torch.equal(kc, kc2) and torch.equal(vc, vc2))
    err = ((out.double() - ref.double()).norm() / ref.double().norm()).item()
    return same, err

if __name__ == '__main__':
    R = dict(errors={}, check=[], chain=[], layer=[])
    save = saver(R, 'decode_ladder_gpu')
    dev = 'cuda'

    def check():
        for name, f in COMPLETE.items():
            worst = 0.
            for dt, heads in ((torch.float32, (16, 8, 128)), (torch.bfloat16, (16, 8, 128)),
                              (torch.bfloat16, (14, 2, 64))):
                hq, hkv, d = heads
                for S, ctx in ((1, [1]), (1, [320]), (1, [1000]), (3, [5, 300, 2000])):
                    same, err = check_one(f, S, hq, hkv, d, ctx, dt, dev)
                    worst = max(worst, err)
                    if not same or err > (1e-5 if dt == torch.float32 else 1e-2):
                        R['check'].append(dict(variant=name, dt=str(dt), heads=(hq, hkv, d), S=S,
                                               ctx=ctx, caches_equal=same, rel_err=err))
            R['check'].append(dict(variant=name, worst_rel_err=worst))
            log(name, 'worst', worst)

    def chain():
        from helpers.graph_timing import graph_us
        for ctx in (320, 1024, 4096):
            args = inputs(1, 16, 8, 128, [ctx], torch.bfloat16, dev)
            out = torch.empty(1, 16, 128, dtype=torch.bfloat16, device=dev)
            for name, f in (COMPLETE | PARTIAL).items():
                call = lambda f=f: f(*args[:5], 1e-6, *args[5:], 16, out=out)
                us = graph_us([call] * 28, rep=100)
                R['chain'].append(dict(variant=name, ctx=ctx, us=us))
                log(f"chain ctx {ctx} {name}: {us:.2f} µs")
            save()

    def layer():
        from helpers.layer_steps import setup, chain as lchain
        from helpers.graph_timing import graph_us
        from minillm.kernels.gemv import decode_layer
        keep = DEC.rope_decode
        for preset, ctx in (('qwen3-0.6b', 320), ('qwen3-0.6b', 1024), ('qwen3-0.6b', 4096),
                            ('qwen2.5-0.5b', 320)):
            m, cfg, caches, attn, cos, sin, x = setup(preset, ctx=ctx)
            for name in ('dot, combine in two passes (= rope_decode)',
                         'cuda cores, one-trip combine, empty splits exit',
                         'dot, one-trip combine, empty splits exit',
                         'cuda cores, one-trip, exit, 32-key tiles'):
                DEC.rope_decode = COMPLETE[name]
                with torch.no_grad():
                    us = graph_us([lambda: lchain(m, decode_layer, x, cos, sin, attn)], rep=200)
                us /= cfg.num_hidden_layers
                R['layer'].append(dict(preset=preset, ctx=ctx, variant=name, us=us))
                log(f"layer {preset} ctx {ctx} {name}: {us:.2f} µs")
            DEC.rope_decode = keep
            save()
            del m, caches

    for fn in (chain, layer, check): run_section(fn, R, save)
    print('\nchain, µs a launch (S=1, Qwen3-0.6B heads)')
    for r in R['chain']: print(f"{r['ctx']:5} {r['us']:6.2f}  {r['variant']}")
    print('\nlayer, µs')
    for r in R['layer']: print(f"{r['preset']:13} {r['ctx']:5} {r['us']:6.2f}  {r['variant']}")
    print('\nchecks')
    [print(r) for r in R['check']]
