"""The int8 products of Qwen3-8B decoder layers with random weights, as the int8 GEMV benchmarks time them."""
import torch

SHAPES = dict(qkv=(6144, 4096), o=(4096, 4096), gate_up=(24576, 4096), down=(4096, 12288))   # (N, K)

def int8_layers(layers: int = 36, shapes: dict = SHAPES, device='cuda'):
    "Per layer, distinct int8 weights `[N, K]` and bf16 row scales of each product; one bf16 activation row and one output row per product."
    g = torch.Generator(device=device).manual_seed(0)
    W = [{k: (torch.randint(-127, 128, (n, kk), device=device, dtype=torch.int8, generator=g),
              torch.rand(n, device=device, generator=g).to(torch.bfloat16) * 1e-3) for k, (n, kk) in shapes.items()} for _ in range(layers)]
    X = {k: torch.randn(1, kk, device=device, generator=g).to(torch.bfloat16) for k, (n, kk) in shapes.items()}
    O = {k: torch.empty(1, n, device=device, dtype=torch.bfloat16) for k, (n, kk) in shapes.items()}
    return W, X, O
