#include "backend/ref/ref_backend.h"

#include <cmath>
#include <vector>

#include "backend/shape_checks.h"
#include "quant/kv_fp8.h"
#include "quant/kv_int8.h"
#include "quant/quantized_weight.h"

namespace tf {

void RefBackend::embedding(const TensorView& table, const TensorView& out) {
  const auto& ids = batch().token_ids;
  const int64_t d = table.shape[1];
  check_2d(out, int64_t(ids.size()), d, "embedding out");
  for (size_t t = 0; t < ids.size(); ++t) {
    TF_ASSERT(ids[t] >= 0 && ids[t] < table.shape[0], "token id {} out of range", ids[t]);
    if (dtype_is_quantized(table.dtype)) {
      dequantize_row(table, ids[t], out.as<float>() + int64_t(t) * d);
      continue;
    }
    for (int64_t i = 0; i < d; ++i)
      out.as<float>()[int64_t(t) * d + i] = load_f32(table.data, table.dtype, ids[t] * d + i);
  }
}

void RefBackend::rms_norm(const TensorView& x, const TensorView& w, float eps,
                          const TensorView& out) {
  const int64_t d = x.row_size();
  for (int64_t r = 0; r < x.n_rows(); ++r) {
    const float* xr = x.as<float>() + r * d;
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += double(xr[i]) * xr[i];
    const double inv = 1.0 / std::sqrt(ss / double(d) + eps);
    for (int64_t i = 0; i < d; ++i)
      out.as<float>()[r * d + i] = float(xr[i] * inv * load_f32(w.data, w.dtype, i));
  }
}

// Quantized weights (W8/W4/FP8, GGUF blocks) are dequantized row by row to F32
// (quant/quantized_weight.h), then multiplied as float weights are: this defines every
// quantized kernel's result.
void RefBackend::matmul(const TensorView& x, const TensorView& w, const TensorView& bias,
                        const TensorView& out) {
  check_matmul(x, w, bias, out);
  check_quantized(w);
  const int64_t n = x.shape[0], k = x.shape[1], m = w.shape[0];
  std::vector<float> wrow(static_cast<size_t>(k));
  for (int64_t j = 0; j < m; ++j) {
    if (dtype_is_quantized(w.dtype))
      dequantize_row(w, j, wrow.data());
    else
      for (int64_t i = 0; i < k; ++i) wrow[size_t(i)] = load_f32(w.data, w.dtype, j * k + i);
    for (int64_t r = 0; r < n; ++r) {
      double acc = bias.data ? load_f32(bias.data, bias.dtype, j) : 0.0;
      for (int64_t i = 0; i < k; ++i) acc += double(x.as<float>()[r * k + i]) * wrow[size_t(i)];
      out.as<float>()[r * m + j] = float(acc);
    }
  }
}

// One q or k head as QkRope says: RMSNorm with `norm` (when set), then rotate-half RoPE
// (Hugging Face Llama) of the first 2 * n_freq dims: the pair (i, i + n_freq) rotated by
// pos * inv_freq[i], cos and sin times mscale.
static void norm_rope_head(float* v, int64_t head_dim, int32_t pos, const QkRope& r, const TensorView& norm) {
  if (norm.data) {
    double ss = 0;
    for (int64_t i = 0; i < head_dim; ++i) ss += double(v[i]) * v[i];
    const double inv = 1.0 / std::sqrt(ss / double(head_dim) + r.eps);
    for (int64_t i = 0; i < head_dim; ++i) v[i] = float(v[i] * inv * load_f32(norm.data, norm.dtype, i));
  }
  const int64_t half = r.inv_freq.numel();
  const float* freq = (r.inv_freq_long.data && pos >= r.long_from ? r.inv_freq_long : r.inv_freq).as<float>();
  for (int64_t i = 0; i < half; ++i) {
    const float angle = float(pos) * freq[i];
    const double c = std::cos(angle) * r.mscale, s = std::sin(angle) * r.mscale;
    const double a = v[i], b = v[i + half];
    v[i] = float(a * c - b * s);
    v[i + half] = float(b * c + a * s);
  }
}

// Writes one row of K or V (head_dim values) to row `row` of a layer's pool in the storage
// dtype: rounded to F32/BF16/F16, or quantized to I8 / FP8 with the row's scale
// (src/quant/kv_int8.h, kv_fp8.h).
static void store_kv_row(const TensorView& pool, const TensorView& scales, int64_t row,
                         const float* x, int64_t hd) {
  if (pool.dtype == DType::I8) {
    scales.as<float>()[row] = quantize_row_kv_int8(x, hd, pool.as<int8_t>() + row * hd);
    return;
  }
  if (pool.dtype == DType::FP8) {
    scales.as<float>()[row] = quantize_row_kv_fp8(x, hd, pool.as<uint8_t>() + row * hd);
    return;
  }
  store_row_f32(pool.data, pool.dtype, row * hd, hd, x);
}

// Element i of row `row` of a layer's pool as F32 (I8, FP8: the stored value times the scale).
static float load_kv(const TensorView& pool, const TensorView& scales, int64_t row, int64_t hd,
                     int64_t i) {
  if (pool.dtype == DType::I8)
    return dequantize_kv_int8(pool.as<int8_t>()[row * hd + i], scales.as<float>()[row]);
  if (pool.dtype == DType::FP8)
    return dequantize_kv_fp8(pool.as<uint8_t>()[row * hd + i], scales.as<float>()[row]);
  return load_f32(pool.data, pool.dtype, row * hd + i);
}

void RefBackend::rope_kv_write(int layer, const TensorView& qkv, const QkRope& rope, const AttentionParams& p) {
  const int64_t hd = p.head_dim, row = (p.n_heads + 2 * p.n_kv_heads) * hd;
  check_2d(qkv, batch().n_tokens(), row, "rope_kv_write qkv");
  check_qk_rope(rope, hd);
  const int32_t* slots = slot_mapping(layer);
  for (int32_t t = 0; t < batch().n_tokens(); ++t) {
    float* r = qkv.as<float>() + t * row;
    for (int64_t h = 0; h < p.n_heads + p.n_kv_heads; ++h)
      norm_rope_head(r + h * hd, hd, batch().positions[size_t(t)], rope, h < p.n_heads ? rope.q_norm : rope.k_norm);
    const int64_t slot = slots[t];
    for (int64_t h = 0; h < p.n_kv_heads; ++h) {
      const int64_t kv_row = kv_row_index(layer, slot, h);
      store_kv_row(k_cache(layer), k_scale(layer), kv_row, r + (p.n_heads + h) * hd, hd);
      store_kv_row(v_cache(layer), v_scale(layer), kv_row, r + (p.n_heads + p.n_kv_heads + h) * hd, hd);
    }
  }
}

void RefBackend::attention(int layer, const TensorView& qkv, const AttentionParams& p,
                           const TensorView& out) {
  const Batch& b = batch();
  const int64_t hd = p.head_dim, row = (p.n_heads + 2 * p.n_kv_heads) * hd;
  const int64_t group = p.n_heads / p.n_kv_heads, bs = kv_spec().block_size;
  check_2d(out, b.n_tokens(), p.n_heads * hd, "attention out");
  const TensorView &kc = k_cache(layer), &vc = v_cache(layer);
  const TensorView &ks = k_scale(layer), &vs = v_scale(layer);
  for (int32_t s = 0; s < b.n_seqs(); ++s) {
    const int32_t* table = block_tables(layer) + int64_t(s) * b.max_blocks;
    for (int32_t t = b.seq_starts[size_t(s)]; t < b.seq_starts[size_t(s) + 1]; ++t) {
      const int32_t qpos = b.positions[size_t(t)];
      const int32_t first = p.sliding_window > 0 ? std::max<int32_t>(0, qpos - int32_t(p.sliding_window) + 1) : 0;
      for (int64_t h = 0; h < p.n_heads; ++h) {
        const float* q = qkv.as<float>() + t * row + h * hd;
        const int64_t kvh = h / group;
        std::vector<double> scores;
        double mx = -INFINITY;
        for (int32_t kp = first; kp <= qpos; ++kp) {
          const int64_t kv_row = kv_row_index(layer, int64_t(table[kp / bs]) * bs + kp % bs, kvh);
          double dot = 0;
          for (int64_t i = 0; i < hd; ++i) dot += double(q[i]) * load_kv(kc, ks, kv_row, hd, i);
          scores.push_back(dot * p.scale);
          mx = std::max(mx, scores.back());
        }
        double sum = 0;
        for (double& sc : scores) sum += (sc = std::exp(sc - mx));
        float* o = out.as<float>() + t * p.n_heads * hd + h * hd;
        for (int64_t i = 0; i < hd; ++i) {
          double acc = 0;
          for (int32_t kp = first; kp <= qpos; ++kp) {
            const int64_t kv_row = kv_row_index(layer, int64_t(table[kp / bs]) * bs + kp % bs, kvh);
            acc += scores[size_t(kp - first)] * load_kv(vc, vs, kv_row, hd, i);
          }
          o[i] = float(acc / sum);
        }
      }
    }
  }
}

// silu(g) = g / (1 + e^-g);  gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2 / pi) (g + 0.044715 g^3)))
static double silu(double g) { return g / (1.0 + std::exp(-g)); }
static double gelu_tanh(double g) {
  return 0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)));
}

template <double (*Act)(double)>
static void gated(const TensorView& gate_up, const TensorView& out, const char* what) {
  const int64_t d_ff = out.shape[1];
  check_2d(gate_up, out.shape[0], 2 * d_ff, what);
  for (int64_t r = 0; r < out.shape[0]; ++r) {
    for (int64_t i = 0; i < d_ff; ++i) {
      const double g = gate_up.as<float>()[r * 2 * d_ff + i];
      const double u = gate_up.as<float>()[r * 2 * d_ff + d_ff + i];
      out.as<float>()[r * d_ff + i] = float(Act(g) * u);
    }
  }
}

void RefBackend::swiglu(const TensorView& gate_up, const TensorView& out) { gated<silu>(gate_up, out, "swiglu gate_up"); }
void RefBackend::geglu(const TensorView& gate_up, const TensorView& out) { gated<gelu_tanh>(gate_up, out, "geglu gate_up"); }

// Token by token, expert by expert in j order, straight from the definition: the expert's
// gate and up rows against x, silu(gate) * up rounded to F32 (as the activations of a dense
// MLP are), then its down rows, each sum in double.
void RefBackend::moe_experts(const TensorView& x, const TensorView& ids, const TensorView& weights,
                             const TensorView& w_gate_up, const TensorView& w_down, const MoeParams& p,
                             const TensorView& out) {
  const MoeShape m = check_moe(x, ids, weights, w_gate_up, w_down, p, out);
  check_quantized(w_gate_up);
  check_quantized(w_down);
  // Row r of a weight as F32 (quantized ones dequantized as matmul does).
  auto row_of = [](const TensorView& w, int64_t r, std::vector<float>& v) {
    const int64_t k = w.shape[1];
    v.resize(size_t(k));
    if (dtype_is_quantized(w.dtype)) return dequantize_row(w, r, v.data());
    for (int64_t c = 0; c < k; ++c) v[size_t(c)] = load_f32(w.data, w.dtype, r * k + c);
  };
  std::vector<float> act(size_t(m.d_ff)), gw, uw, dw;
  for (int64_t t = 0; t < m.rows; ++t) {
    const float* xt = x.as<const float>() + t * m.d_model;
    std::vector<double> acc(size_t(m.d_model), 0.0);
    for (int64_t j = 0; j < p.top_k; ++j) {
      const int64_t e = ids.as<const int32_t>()[t * p.top_k + j];
      TF_ASSERT(e >= 0 && e < p.n_experts, "moe_experts: expert id {} of {}", e, p.n_experts);
      const double wt = weights.as<const float>()[t * p.top_k + j];
      for (int64_t i = 0; i < m.d_ff; ++i) {
        double g = 0, u = 0;
        const int64_t gate_row = e * 2 * m.d_ff + i, up_row = gate_row + m.d_ff;
        row_of(w_gate_up, gate_row, gw);
        row_of(w_gate_up, up_row, uw);
        for (int64_t c = 0; c < m.d_model; ++c) {
          g += double(xt[c]) * gw[size_t(c)];
          u += double(xt[c]) * uw[size_t(c)];
        }
        act[size_t(i)] = float(silu(double(float(g))) * double(float(u)));
      }
      for (int64_t c = 0; c < m.d_model; ++c) {
        double y = 0;
        row_of(w_down, e * m.d_model + c, dw);
        for (int64_t i = 0; i < m.d_ff; ++i) y += double(act[size_t(i)]) * dw[size_t(i)];
        acc[size_t(c)] += wt * double(float(y));
      }
    }
    for (int64_t c = 0; c < m.d_model; ++c) out.as<float>()[t * m.d_model + c] = float(acc[size_t(c)]);
  }
}

void RefBackend::gather_logit_rows(const TensorView& x, const TensorView& out) {
  const int64_t d = x.shape[1];
  check_2d(out, batch().n_out(), d, "gather_logit_rows out");
  for (int32_t i = 0; i < batch().n_out(); ++i)
    for (int64_t j = 0; j < d; ++j)
      out.as<float>()[i * d + j] = x.as<float>()[int64_t(batch().logits_rows[size_t(i)]) * d + j];
}

}  // namespace tf
