"""Decode steps for the attention scripts: a paged K/V cache holding sequences of given context lengths in shuffled
blocks, and the attention of one query per sequence over it by the project's PyTorch reference."""
import torch
from minillm.paged import paged_attention_ref

def paged_step(ctxs, hq=16, hkv=8, d=128, bs=16, dtype=torch.bfloat16, device='cuda', generator=None):
    "(q, k_cache, v_cache, block_tables, context_lens) of one decode step over sequences of `ctxs` keys."
    S, nblk = len(ctxs), sum(-(-c // bs) for c in ctxs)
    rand = lambda *shape: torch.randn(*shape, dtype=dtype, device=device, generator=generator)
    kc, vc = rand(nblk + 1, bs, hkv, d), rand(nblk + 1, bs, hkv, d)
    perm, i = torch.randperm(nblk, device=device, generator=generator).int(), 0
    bt = torch.zeros(S, -(-max(ctxs) // bs), dtype=torch.int32, device=device)
    for r, c in enumerate(ctxs):
        n = -(-c // bs)
        bt[r, :n] = perm[i:i + n]
        i += n
    return rand(S, hq, d), kc, vc, bt, torch.tensor(ctxs, dtype=torch.int32, device=device)

def reference(q, kc, vc, bt, lens):
    "The step's attention by chapter 06's PyTorch reference, in fp32: one query per sequence."
    qsl = torch.arange(len(lens) + 1, dtype=torch.int32, device=q.device)
    return paged_attention_ref(q, kc, vc, bt, lens, qsl)
