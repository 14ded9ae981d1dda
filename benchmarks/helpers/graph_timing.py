"""Timing shared by the GPU benchmark scripts: µs per call of a sequence of calls replayed from one CUDA graph,
as a decode step runs them (no launch gaps from Python)."""
import time
import torch

def graph_us(calls, rep: int = 20) -> float:
    "µs per call of `calls` captured back to back in one CUDA graph (median replay); without CUDA, one timed eager pass."
    if not torch.cuda.is_available():
        t = time.perf_counter()
        for c in calls: c()
        return (time.perf_counter() - t) * 1e6 / len(calls)
    from triton.testing import do_bench
    st = torch.cuda.Stream()
    st.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(st):
        for c in calls: c()                                   # compile, settle the allocator
    torch.cuda.current_stream().wait_stream(st)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for c in calls: c()
    us = do_bench(g.replay, warmup=5, rep=rep, return_mode='median') * 1e3 / len(calls)
    del g
    return us
