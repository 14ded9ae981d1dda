"""A one-token decode step through a model's decoder layers: a random model of a preset's exact shapes on the fused
kernels, a paged cache holding a context, and the step's `attn`, for the scripts that time a layer at batch 1."""
import types
import torch
from minillm.config import ModelConfig
from minillm.loading import PRESETS
from minillm.model import QwenForCausalLM
from minillm.runner import PagedAttention
from minillm.kernels.attention import paged_attention
from minillm.kernels.gemv import use_fused_kernels
import minillm.kernels.decode                # gives PagedAttention the one-launch attention

def setup(preset, layers=None, ctx=320, dtype=torch.bfloat16, bs=16, dev='cuda'):
    "A random model of `preset`'s shapes (its first `layers` layers) on the fused kernels, a paged cache of `ctx` tokens, a one-token step's `attn`."
    c = {k: v for k, v in PRESETS[preset].items() if k in ModelConfig.__dataclass_fields__}
    cfg = ModelConfig(**(c | dict(num_hidden_layers=layers or c['num_hidden_layers'])))
    torch.manual_seed(0)
    with torch.device(dev): m = QwenForCausalLM(cfg).to(dtype).eval()
    for n, p in m.named_parameters():
        torch.nn.init.normal_(p, mean=1.0 if 'norm' in n else 0.0, std=0.1 if 'norm' in n else 0.02)
    use_fused_kernels(m)
    L, w = cfg.num_hidden_layers, -(-ctx // bs)
    caches = [tuple(torch.randn(w + 1, bs, cfg.num_key_value_heads, cfg.head_dim, dtype=dtype,
                                device=dev) for _ in range(2)) for _ in range(L)]
    bt = torch.randperm(w, device=dev).int()[None]
    b = types.SimpleNamespace(max_q_len=1, block_tables=bt,
                              context_lens=torch.tensor([ctx], dtype=torch.int32, device=dev),
                              slot_mapping=(bt[:, (ctx - 1) // bs] * bs + (ctx - 1) % bs).int())
    out = torch.empty(1, cfg.num_attention_heads, cfg.head_dim, dtype=dtype, device=dev)
    attn = PagedAttention(caches, b, out, store=None, attend=paged_attention)
    m.rotary.build(dev)
    cos, sin = m.rotary(torch.tensor([[ctx - 1]], device=dev))
    x = torch.randn(1, 1, cfg.hidden_size, dtype=dtype, device=dev)
    return m, cfg, caches, attn, cos, sin, x

def chain(m, f, x, cos, sin, attn):
    "A step's layers through `f` (the layer function), as `QwenModel` runs them."
    res = None
    for layer in m.model.layers: x, res = f(layer, x, res, cos, sin, attn)
    return x, res

def layer_mb(cfg) -> float:
    "MB of one decoder layer's bf16 weights."
    h, i, q, kv = cfg.hidden_size, cfg.intermediate_size, cfg.q_size, cfg.kv_size
    return 2 * (h * (q + 2 * kv) + q * h + 2 * h * i + i * h) / 1e6
