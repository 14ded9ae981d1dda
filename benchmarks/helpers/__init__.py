"""What the benchmark scripts share: results and logging (bench_io), timing captured kernel chains (graph_timing),
the int8 products of a Qwen3-8B layer (int8_products), and building chapter 14's CUDA kernel (rmsnorm_cuda)."""
