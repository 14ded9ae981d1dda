// RMSNorm and fused residual-add + RMSNorm for minillm, loaded with torch.utils.cpp_extension.load.
//
// The math is exactly minillm.layers.RMSNorm's, in the same order and the same dtypes:
//   s   = T(float(x) + float(residual))            (fused form only: the residual add rounds to T)
//   r   = rsqrt(mean(float(s)^2) + eps)            (fp32 accumulation; mean = sum * (1/width), as PyTorch's)
//   out = T(float(w) * float(T(float(s) * r)))     (normalise in fp32, cast to T, then multiply by the weight)
//
// One thread block per row. Each thread loads NV vectors of VEC elements (16 bytes when VEC = 16 / sizeof(T)),
// keeps them in registers, reduces the sum of squares with warp shuffles and then through shared memory, and
// writes the row back: one read of x (and residual), one write of out (and the new residual).
// Widths that are not a multiple of the vector width, or rows that are not 16-byte aligned, use VEC = 1.
// Only conversions that every architecture has are used (c10::Half / c10::BFloat16 <-> float), so the
// half path builds for sm_75 as well as sm_90.
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>

namespace {

constexpr int kMaxThreads = 1024;
constexpr int kMaxNV = 8;  // vectors held per thread: rows up to kMaxNV * kMaxThreads * VEC elements

template <typename T, int N>
struct alignas(sizeof(T) * N) Vec { T v[N]; };

// Sum over the block; every thread gets the result. blockDim.x is a multiple of 32.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[32];
  __shared__ float total;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < (int)(blockDim.x >> 5) ? partial[lane] : 0.f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) total = v;
  }
  __syncthreads();
  return total;
}

template <typename T, int VEC, int NV, bool FUSED>
__global__ void __launch_bounds__(kMaxThreads)
rmsnorm_kernel(T* __restrict__ out, T* __restrict__ res_out, const T* __restrict__ x,
               const T* __restrict__ res, const T* __restrict__ w, int width, float inv_width, float eps) {
  using V = Vec<T, VEC>;
  const int nvec = width / VEC;
  const int64_t row = (int64_t)blockIdx.x * width;
  const V* xv = reinterpret_cast<const V*>(x + row);
  V vals[NV];  // the row stays in registers, in T (half the registers of fp32 for 16-bit types)
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < NV; i++) {  // all loads of the row issued before any use
    const int j = threadIdx.x + i * blockDim.x;
    if (j < nvec) {
      V a = xv[j];
      if constexpr (FUSED) {
        const V b = reinterpret_cast<const V*>(res + row)[j];
#pragma unroll
        for (int k = 0; k < VEC; k++) a.v[k] = T(static_cast<float>(a.v[k]) + static_cast<float>(b.v[k]));
        reinterpret_cast<V*>(res_out + row)[j] = a;
      }
      vals[i] = a;
#pragma unroll
      for (int k = 0; k < VEC; k++) {
        const float f = static_cast<float>(a.v[k]);
        ss += f * f;
      }
    }
  }
  // The weight does not depend on the reduction: for rows of up to 4 vectors per thread, load it before the
  // block-wide sum so that its latency hides behind the reduction (more vectors would spill registers).
  constexpr int NW = NV <= 4 ? NV : 1;
  const V* wv = reinterpret_cast<const V*>(w);
  V wpre[NW];
#pragma unroll
  for (int i = 0; i < NW; i++) {
    const int j = threadIdx.x + i * blockDim.x;
    if (NV <= 4 && j < nvec) wpre[i] = wv[j];
  }
  const float r = rsqrtf(block_sum(ss) * inv_width + eps);
  V* ov = reinterpret_cast<V*>(out + row);
#pragma unroll
  for (int i = 0; i < NV; i++) {
    const int j = threadIdx.x + i * blockDim.x;
    if (j < nvec) {
      const V wj = NV <= 4 ? wpre[i < NW ? i : 0] : wv[j];
      V o;
#pragma unroll
      for (int k = 0; k < VEC; k++)
        o.v[k] = T(static_cast<float>(wj.v[k]) * static_cast<float>(T(static_cast<float>(vals[i].v[k]) * r)));
      ov[j] = o;
    }
  }
}

template <typename T, int VEC, bool FUSED>
void launch_vec(T* out, T* res_out, const T* x, const T* res, const T* w, int64_t rows, int width, float eps,
                cudaStream_t stream) {
  const int nvec = width / VEC;
  int nv = 1;
  while (nv < kMaxNV && nvec > nv * kMaxThreads) nv *= 2;
  TORCH_CHECK(nvec <= nv * kMaxThreads, "rms_norm: width ", width, " is too large for the CUDA kernel (at most ",
              kMaxNV * kMaxThreads * VEC, " for this dtype and alignment)");
  const int threads = std::min(kMaxThreads, ((nvec + nv - 1) / nv + 31) / 32 * 32);
  const dim3 grid((unsigned)rows), block(threads);
#define MINILLM_LAUNCH(NV_)                                                                                  \
  rmsnorm_kernel<T, VEC, NV_, FUSED><<<grid, block, 0, stream>>>(out, res_out, x, res, w, width, 1.f / width, eps)
  switch (nv) {
    case 1: MINILLM_LAUNCH(1); break;
    case 2: MINILLM_LAUNCH(2); break;
    case 4: MINILLM_LAUNCH(4); break;
    default: MINILLM_LAUNCH(8); break;
  }
#undef MINILLM_LAUNCH
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

template <typename T, bool FUSED>
void launch(T* out, T* res_out, const T* x, const T* res, const T* w, int64_t rows, int width, float eps,
            cudaStream_t stream) {
  constexpr int VEC = 16 / sizeof(T);
  const bool vec_ok = width % VEC == 0 && aligned16(out) && aligned16(x) && aligned16(w) &&
                      (!FUSED || (aligned16(res_out) && aligned16(res)));
  if (vec_ok) launch_vec<T, VEC, FUSED>(out, res_out, x, res, w, rows, width, eps, stream);
  else launch_vec<T, 1, FUSED>(out, res_out, x, res, w, rows, width, eps, stream);
}

void check_inputs(const torch::Tensor& x, const torch::Tensor& w, const char* fn) {
  TORCH_CHECK(x.is_cuda(), fn, ": x must be a CUDA tensor, got device ", x.device());
  TORCH_CHECK(w.device() == x.device(), fn, ": weight is on ", w.device(), " but x is on ", x.device());
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16,
              fn, ": x must be float32, float16 or bfloat16, got ", x.scalar_type());
  TORCH_CHECK(w.scalar_type() == x.scalar_type(), fn, ": weight dtype ", w.scalar_type(), " must equal x dtype ",
              x.scalar_type());
  TORCH_CHECK(x.dim() >= 1 && x.is_contiguous(), fn, ": x must be contiguous with at least one dimension");
  TORCH_CHECK(w.dim() == 1 && w.is_contiguous() && w.numel() == x.size(-1), fn,
              ": weight must be a contiguous 1-D tensor of length x.shape[-1] = ", x.size(-1), ", got shape ",
              w.sizes());
  TORCH_CHECK(x.size(-1) <= INT32_MAX, fn, ": width too large");
}

// Calls f(T{}) with T the C++ type of dtype (float, at::Half or at::BFloat16; checked before).
template <typename F>
void dispatch(at::ScalarType dtype, F&& f) {
  switch (dtype) {
    case at::kFloat: f(float{}); break;
    case at::kHalf: f(at::Half{}); break;
    default: f(at::BFloat16{}); break;
  }
}

}  // namespace

torch::Tensor rms_norm(torch::Tensor x, torch::Tensor weight, double eps) {
  check_inputs(x, weight, "rms_norm");
  auto out = torch::empty_like(x);
  const int width = (int)x.size(-1);
  const int64_t rows = width ? x.numel() / width : 0;
  if (rows == 0 || width == 0) return out;
  const c10::cuda::CUDAGuard guard(x.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  dispatch(x.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    launch<T, false>(out.data_ptr<T>(), nullptr, x.data_ptr<T>(), nullptr, weight.data_ptr<T>(), rows, width,
                     (float)eps, stream);
  });
  return out;
}

std::vector<torch::Tensor> fused_add_rms_norm(torch::Tensor x, torch::Tensor residual, torch::Tensor weight,
                                              double eps) {
  check_inputs(x, weight, "fused_add_rms_norm");
  TORCH_CHECK(residual.device() == x.device() && residual.scalar_type() == x.scalar_type() &&
                  residual.sizes() == x.sizes() && residual.is_contiguous(),
              "fused_add_rms_norm: residual must be a contiguous tensor with x's shape, dtype and device; got ",
              residual.sizes(), " ", residual.scalar_type(), " on ", residual.device());
  auto out = torch::empty_like(x);
  auto res_out = torch::empty_like(x);
  const int width = (int)x.size(-1);
  const int64_t rows = width ? x.numel() / width : 0;
  if (rows == 0 || width == 0) return {out, res_out};
  const c10::cuda::CUDAGuard guard(x.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  dispatch(x.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    launch<T, true>(out.data_ptr<T>(), res_out.data_ptr<T>(), x.data_ptr<T>(), residual.data_ptr<T>(),
                    weight.data_ptr<T>(), rows, width, (float)eps, stream);
  });
  return {out, res_out};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("rms_norm", &rms_norm, "RMSNorm of the last dimension (CUDA)");
  m.def("fused_add_rms_norm", &fused_add_rms_norm, "(rms_norm(x + residual), x + residual) (CUDA)");
}
