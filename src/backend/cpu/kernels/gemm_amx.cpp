// BF16-weight GEMM for prefill on AMX tiles (KernelTable::gemm_amx_*; compiled at the levels
// with AVX-512 VNNI, these functions with the AMX and AVX512-BF16 instructions enabled by
// target attributes, and called only where amx_tiles_permitted()): out[n, m] = x[n, k] @
// w[m, k]^T (+ bias), the activations rounded to BF16 (nearest even), the products summed in
// F32 by TDPBF16PS.
//
// The tile product C[16 x 16] += A[16 x 32] . B[32 x 16] takes A from the weights as they are
// stored (16 rows of 32 k elements, row stride k) and B from the activations packed once per
// call into the pair-interleaved form the instruction wants: xv [tile][k / 2][16 tokens][2],
// so tile row p holds the pair (2p, 2p + 1) of 16 tokens. C is then [16 features][16 tokens]
// and is written transposed into out. A block is 32 weight rows (two A tiles) against two
// token tiles at a time (four C tiles, two B tiles: all 8 tile registers), walking k in steps
// of 32. k and m must be multiples of 32; a token tile past n is zero-padded and its outputs
// not written.
#include "backend/cpu/kernels/kernels.h"

#if defined(__AVX512VNNI__)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#define TF_AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512bf16")))

namespace tf::cpu::TF_CPU_ISA_NS {
namespace {

constexpr int64_t kTok = kAmxTileTokens;  // tokens of a B tile
constexpr int64_t kRows = kAmxBlockRows;   // weight rows of a block (two A tiles)
constexpr int64_t kKStep = kAmxKStep;      // k elements of one tile product
static_assert(kTok == 16 && kRows == 32 && kKStep == 32, "the tile shapes of the configuration below");

// Palette 1, every tile 16 rows of 64 bytes: 0-3 C (F32), 4-5 A (weights), 6-7 B (tokens).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

const TileConfig& tile_config() {
  static const TileConfig c = [] {
    TileConfig t;
    for (int i = 0; i < 8; ++i) {
      t.colsb[i] = 64;
      t.rows[i] = 16;
    }
    return t;
  }();
  return c;
}

// C tile `c` (features f0.., tokens t0..) into out, transposed, plus the bias.
void store_tile(const float (&c)[16][16], const MatmulArgs& a, int64_t f0, int64_t t0) {
  const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                         _mm512_set1_epi32(16));
  const __m512 bias = a.bias ? _mm512_loadu_ps(a.bias + f0) : _mm512_setzero_ps();
  const int64_t n_tok = std::min<int64_t>(kTok, a.n - t0);
  for (int64_t t = 0; t < n_tok; ++t) {
    const __m512 col = _mm512_i32gather_ps(idx, &c[0][t], 4);  // c[f][t], f = 0..15
    _mm512_storeu_ps(a.out + (t0 + t) * a.m + f0, _mm512_add_ps(col, bias));
  }
}

}  // namespace

TF_AMX_TARGET void gemm_amx_pack_x(const float* x, int64_t n, int64_t k, int64_t tile0, int64_t tile1, uint16_t* xv) {
  const int64_t pairs = k / 2;
  for (int64_t t = tile0; t < tile1; ++t) {
    uint32_t* dst = reinterpret_cast<uint32_t*>(xv + t * k * kTok);
    for (int64_t j = 0; j < kTok; ++j) {
      const int64_t tok = t * kTok + j;
      if (tok >= n) {
        for (int64_t p = 0; p < pairs; ++p) dst[p * kTok + j] = 0;
        continue;
      }
      const float* src = x + tok * k;
      for (int64_t p = 0; p < pairs; p += 16) {  // 32 values -> 16 pairs (k % 32 == 0)
        const __m512bh h = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + 2 * p + 16), _mm512_loadu_ps(src + 2 * p));
        uint32_t w[16];
        std::memcpy(w, &h, sizeof(w));
        for (int64_t e = 0; e < 16; ++e) dst[(p + e) * kTok + j] = w[e];
      }
    }
  }
}

TF_AMX_TARGET void gemm_amx_blocks(const MatmulArgs& a, const uint16_t* xv, int64_t b0, int64_t b1) {
  const auto* w = static_cast<const uint16_t*>(a.w);
  const int64_t n_tiles = (a.n + kTok - 1) / kTok, tile_elems = a.k * kTok;
  const int64_t w_stride = a.k * 2, b_stride = kTok * 4;  // bytes between tile rows
  alignas(64) float c[4][16][16];
  _tile_loadconfig(&tile_config());
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t f0 = b * kRows;
    const uint16_t* w0 = w + f0 * a.k;
    const uint16_t* w1 = w0 + 16 * a.k;
    for (int64_t t = 0; t < n_tiles; t += 2) {
      const bool two = t + 1 < n_tiles;
      const uint16_t* x0 = xv + t * tile_elems;
      const uint16_t* x1 = two ? x0 + tile_elems : x0;
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (int64_t k0 = 0; k0 < a.k; k0 += kKStep) {
        _tile_loadd(4, w0 + k0, w_stride);
        _tile_loadd(5, w1 + k0, w_stride);
        _tile_loadd(6, x0 + k0 * kTok, b_stride);  // rows k0 / 2 .. + 16 of the pair tile
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 5, 6);
        if (two) {
          _tile_loadd(7, x1 + k0 * kTok, b_stride);
          _tile_dpbf16ps(2, 4, 7);
          _tile_dpbf16ps(3, 5, 7);
        }
      }
      _tile_stored(0, c[0], 64);
      _tile_stored(1, c[1], 64);
      store_tile(c[0], a, f0, t * kTok);
      store_tile(c[1], a, f0 + 16, t * kTok);
      if (two) {
        _tile_stored(2, c[2], 64);
        _tile_stored(3, c[3], 64);
        store_tile(c[2], a, f0, (t + 1) * kTok);
        store_tile(c[3], a, f0 + 16, (t + 1) * kTok);
      }
    }
  }
  _tile_release();
}

}  // namespace tf::cpu::TF_CPU_ISA_NS

#endif
