"""Decode steps for the attention scripts: a paged K/V cache holding sequences of given context lengths in shuffled
blocks, and the attention of one query per sequence over it, computed in fp32 by PyTorch."""
import torch

def paged_step(ctxs, hq=16, hkv=8, d=128, bs=16, dtype=torch.bfloat16, device='cuda', generator=None):
    "(q, k_cache, v_cache, block_tables, context_lens) of one decode step over sequences of `ctxs` keys."
    S, nblk = len(ctxs), sum(-(-c // bs) for c in ctxs)
    rand = lambda *shape: torch.randn(*shape, dtype=dtype, device=device, generator=generator)
    kc, vc = rand(nblk + 1, bs, hkv, d), rand(nblk + 1, bs, hkv, d)
    perm, i = torch.randperm(nblk, device=device, generator=generator).int(), 0
    bt = torch.zeros(S, -(-max(ctxs) // bs), dtype=torch.int32, device=device)
    for r, c in enumerate(ctxs):
        n = -(-c // bs); bt[r, :n] = perm[i:i + n]; i += n
    return rand(S, hq, d), kc, vc, bt, torch.tensor(ctxs, dtype=torch.int32, device=device)

def reference(q, kc, vc, bt, lens):
    "Attention of each sequence's one query over its cached keys, gathered and computed in fp32."
    out, bs = torch.empty_like(q), kc.shape[1]
    for r, c in enumerate(lens.tolist()):
        k, v = (x[bt[r, :-(-c // bs)].long()].flatten(0, 1)[:c].float().repeat_interleave(q.shape[1] // x.shape[2], 1)
                for x in (kc, vc))                                           # [c, Hq, D]
        p = torch.einsum('hd,chd->hc', q[r].float(), k) * q.shape[-1] ** -0.5
        out[r] = torch.einsum('hc,chd->hd', p.softmax(-1), v).to(q.dtype)
    return out
