// CPU matmul for quantized weights on integer dot products (kernels/qmatmul.cpp): each row
// of x is quantized per block of 32 once per call (16 bits as two int8 planes, or 8 bits with
// BackendOptions::int8_activations), then the weight row blocks are
// split across the pool's threads as for float weights (matmul.cpp), so each weight byte
// is read once per call. 4-bit weights (Q4_0, Q4_1, W4, Q4_K), 8-bit ones (Q8_0, W8), Q6_K and Q5_K uploaded
// through this backend also have a repacked copy (quant_pack.h: U4x4, U8x4), which the kernels
// of AVX2 and above read instead. Prefill with 16-bit activations where the level says so
// (KernelTable::prefill_dequant_8bit / _4bit: below VNNI) runs the float GEMM over the
// weights dequantized in chunks instead: there the integer GEMM's two byte products a block
// cost more than the F32 multiply-adds.
#include <cstdio>
#include <cstring>
#include <algorithm>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/quant_pack.h"
#include "backend/shape_checks.h"

namespace tf {
namespace {

constexpr int64_t kMinChunkBytes = 16 * 1024;  // as matmul.cpp
// From this many tokens the integer GEMM (kernels/qgemm_packed.cpp) runs instead of the
// few-token kernels: measured with bench_cpu_forward (docs/PERF.md, 2026-12-03), it was
// ahead from 8 tokens on tiny-main and the 1B shape; at 4 between 5% behind (tiny-main Q8_0)
// and 1.46x ahead (1B-shape Q8_0); behind at 2.
constexpr int64_t kQGemmMinTokens = 4;

// The kernel format of w, or kCount when the integer kernels do not cover it.
cpu::QFormat qformat_of(const TensorView& w) {
  const int64_t k = w.shape[1];
  if (k % 32 != 0) return cpu::QFormat::kCount;
  switch (w.dtype) {
    case DType::W8: return w.scales ? cpu::QFormat::W8 : cpu::QFormat::kCount;
    case DType::W4:
      return w.scales && w.zeros && w.group_size > 0 && w.group_size % 32 == 0 && k % w.group_size == 0
                 ? cpu::QFormat::W4
                 : cpu::QFormat::kCount;
    case DType::Q8_0: return cpu::QFormat::Q8_0;
    case DType::Q4_0: return cpu::QFormat::Q4_0;
    case DType::Q4_1: return cpu::QFormat::Q4_1;
    case DType::Q4_K: return k % 256 == 0 ? cpu::QFormat::Q4_K : cpu::QFormat::kCount;
    case DType::Q5_K: return k % 256 == 0 ? cpu::QFormat::Q5_K : cpu::QFormat::kCount;
    case DType::Q6_K: return k % 256 == 0 ? cpu::QFormat::Q6_K : cpu::QFormat::kCount;
    default: return cpu::QFormat::kCount;
  }
}

}  // namespace

bool CpuBackend::prefill_dequantizes(const TensorView& w, int64_t n) const {
  const cpu::QFormat fmt = qformat_of(w);
  const cpu::KernelTable& kt = cpu::kernels();
  bool level_takes = false;
  switch (fmt) {  // kernels/dequant.h covers every format with integer kernels
    case cpu::QFormat::W8:
    case cpu::QFormat::Q8_0: level_takes = kt.prefill_dequant_8bit; break;
    // No integer GEMM (their U8x4 copies serve few-token tiles; the canonical kernels unpack
    // the 5- and 6-bit values at each step): the float GEMM wins at every level (1B shape:
    // 2.1-2.9x, docs/PERF.md).
    case cpu::QFormat::Q5_K:
    case cpu::QFormat::Q6_K: level_takes = true; break;
    case cpu::QFormat::W4:
    case cpu::QFormat::Q4_0:
    case cpu::QFormat::Q4_1:
    case cpu::QFormat::Q4_K: level_takes = kt.prefill_dequant_4bit; break;
    default: break;
  }
  return level_takes && !int8_activations_ && n >= kt.gemm_tile_tokens;
}

bool CpuBackend::matmul_quant_fast(const TensorView& x, const TensorView& w, const TensorView& bias,
                                   const TensorView& out) {
  if (x.n_dims != 2 || w.n_dims != 2 || x.dtype != DType::F32 || out.dtype != DType::F32) return false;
  const cpu::QFormat fmt = qformat_of(w);
  const cpu::KernelTable& kt = cpu::kernels();
  if (fmt == cpu::QFormat::kCount || !kt.qmatmul_blocks[size_t(fmt)]) return false;
  check_matmul(x, w, bias, out);
  const int64_t n = x.shape[0], k = x.shape[1], m = w.shape[0], k4 = k / 4;
  const bool wide = !int8_activations_;
  if (prefill_dequantizes(w, n)) {
    gemm_float({.x = x.as<float>(), .w = w.data, .w_dtype = w.dtype, .wq = &w, .bias = bias_f32(bias), .out = out.as<float>(),
                .n = n, .k = k, .m = m},
               int64_t(dtype_row_bytes(w.dtype, k)));
    return true;
  }
  ThreadPool& tp = pool();

  // ---- quantize the activations, rows split across the threads
  const int64_t nb = k / 32;
  act_q_.resize(size_t((wide ? 2 : 1) * n * k));
  int8_t* q2 = wide ? act_q_.data() + n * k : nullptr;
  act_ds_.resize(size_t(n * (2 * k4 + 2 * nb)));
  float* dl = act_ds_.data();
  float* xs = dl + n * k4;
  float* db = xs + n * k4;
  float* sb = db + n * nb;
  const bool eight_bit = fmt == cpu::QFormat::Q8_0 || fmt == cpu::QFormat::W8 || fmt == cpu::QFormat::Q6_K ||
                         fmt == cpu::QFormat::Q5_K;
  const auto packed_kernel = eight_bit ? kt.qmatmul_u8x4 : kt.qmatmul_u4x4;
  const void* packed = packed_kernel ? packed_weight(w) : nullptr;
  const bool w4_order = fmt == cpu::QFormat::W4 && !packed;  // U4x4 stores W4 in element order
  const auto quantize = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      kt.quantize_row(x.as<float>() + r * k, k, w4_order,
                      {.q = act_q_.data() + r * k, .q2 = q2 ? q2 + r * k : nullptr, .dl = dl + r * k4, .xs = xs + r * k4, .db = db + r * nb,
                       .sb = sb + r * nb});
  };
  if (n < 8) {
    quantize(0, n);
  } else {
    const int64_t chunks = tp.chunks_for(n, 4);
    tp.parallel_for(chunks, [&](int64_t c, int) { quantize(c * n / chunks, (c + 1) * n / chunks); });
  }

  const cpu::QMatmulArgs a{.x = {.q = act_q_.data(), .q2 = q2, .dl = dl, .xs = xs, .db = db, .sb = sb, .n = n, .k = k}, .w = &w,
                           .packed = packed, .bias = bias_f32(bias), .out = out.as<float>(), .m = m};
  if (packed && kt.qgemm && cpu::KernelTable::qgemm_covers(fmt) && n >= kQGemmMinTokens) {
    // ---- prefill: the activations in token tiles, then strips of weight rows against all tokens
    const int64_t n_tiles = (n + kt.qgemm_tokens - 1) / kt.qgemm_tokens, tile_bytes = kt.qgemm_tile_bytes(k, wide);
    act_tiles_.resize(size_t(n_tiles * tile_bytes));
    const int64_t pack_chunks = tp.chunks_for(n_tiles, 1);
    tp.parallel_for(pack_chunks, [&](int64_t c, int) {
      kt.qgemm_pack_acts(a.x, c * n_tiles / pack_chunks, (c + 1) * n_tiles / pack_chunks, act_tiles_.data());
    });
    const int64_t n_strips = (m + kt.qgemm_rows - 1) / kt.qgemm_rows;
    const size_t strip_floats = size_t(kt.qgemm_strip_bytes(k) + 3) / 4;
    for (int t = 0; t < tp.size(); ++t) scratch(t, strip_floats);
    const int64_t n_chunks = tp.chunks_for(n_strips, 1);
    tp.parallel_for(n_chunks, [&](int64_t c, int t) {
      kt.qgemm(a, act_tiles_.data(), c * n_strips / n_chunks, (c + 1) * n_strips / n_chunks,
               reinterpret_cast<uint8_t*>(scratch_[size_t(t)].data()));
    });
    return true;
  }

  // ---- weight row blocks against all tokens
  const int64_t block_rows = packed ? cpu::kU4x4Rows : kt.qmatmul_block_rows;
  const int64_t n_blocks = (m + block_rows - 1) / block_rows;
  const int64_t block_bytes = block_rows * int64_t(dtype_row_bytes(w.dtype, k));
  const int64_t n_chunks = tp.chunks_for(n_blocks, std::max<int64_t>(1, kMinChunkBytes / std::max<int64_t>(1, block_bytes)));
  const auto kernel = packed ? packed_kernel : kt.qmatmul_blocks[size_t(fmt)];
  tp.parallel_for(n_chunks, [&](int64_t c, int) { kernel(a, c * n_blocks / n_chunks, (c + 1) * n_blocks / n_chunks); });
  return true;
}

bool CpuBackend::reads_gguf_block(DType t) const {
  return t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q4_K || t == DType::Q5_K ||
         t == DType::Q6_K;
}

TensorView CpuBackend::upload(const TensorView& host, DType dtype) {
  TensorView v = HostBackend::upload(host, dtype);
  const int64_t bytes4 = cpu::u4x4_bytes(v), bytes8 = bytes4 > 0 ? 0 : cpu::u8x4_bytes(v);
  if (bytes4 > 0 || bytes8 > 0) {
    PackedWeight& p = packed_[v.data];
    p.dtype = v.dtype;
    p.m = v.shape[0];
    p.k = v.shape[1];
    p.bytes = fresh_huge_buffer(size_t(bytes4 + bytes8));
    if (bytes4 > 0) cpu::pack_u4x4(v, p.bytes.data());
    else cpu::pack_u8x4(v, p.bytes.data());
  } else if (huge_pages_ && v.data == host.data && !v.scales && !v.zeros && v.nbytes() >= HugePageBuffer::kHugePage) {
    // (A view with scale or zero arrays stays whole where it is: the loader keeps the memory of
    // an upload kept in place, scales included, and frees it once the data is copied.)
    constexpr int64_t kReserve = int64_t(1) << 30;
    const int64_t available = available_memory_bytes();
    if (available < 0 || available - int64_t(v.nbytes()) >= kReserve) {
      HugePageBuffer copy = fresh_huge_buffer(v.nbytes());
      std::memcpy(copy.data(), v.data, v.nbytes());
      v.data = copy.data();
      copies_.emplace(v.data, std::move(copy));
    } else if (!huge_pages_skipped_) {
      huge_pages_skipped_ = true;
      std::fprintf(stderr,
                   "cpu backend: %.1f GB of memory available, so weights stay on the checkpoint's pages from here "
                   "(no copy onto huge pages; decode reads them more slowly)\n",
                   double(available) / 1e9);
    }
  }
  return v;
}

void CpuBackend::release(const TensorView& buf) {
  packed_.erase(buf.data);
  if (copies_.erase(buf.data) == 0) HostBackend::release(buf);
}

HugePageBuffer CpuBackend::fresh_huge_buffer(size_t bytes) {
  HugePageBuffer b(bytes);
  if (b.advised()) {
    const int64_t pages = int64_t((bytes + HugePageBuffer::kHugePage - 1) / HugePageBuffer::kHugePage);
    ThreadPool& tp = pool();
    const int64_t chunks = tp.chunks_for(pages, 1);
    tp.parallel_for(chunks, [&](int64_t c, int) {
      for (int64_t pg = c * pages / chunks; pg < (c + 1) * pages / chunks; ++pg)
        b.data()[size_t(pg) * HugePageBuffer::kHugePage] = 0;
    });
  }
  return b;
}

const void* CpuBackend::packed_weight(const TensorView& w) const {
  const auto it = packed_.find(w.data);
  if (it == packed_.end()) return nullptr;
  const PackedWeight& p = it->second;
  return p.dtype == w.dtype && p.m == w.shape[0] && p.k == w.shape[1] ? p.bytes.data() : nullptr;
}

}  // namespace tf
