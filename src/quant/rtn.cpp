// Round to nearest (the baseline quantizer, and what loading quantizes 16-bit weights with),
// and the input checks every quantizer runs first.
#include "core/error.h"
#include "quant/quantizer.h"

namespace tf {

void check_quantizer_inputs(const float* w, int64_t m, int64_t k, const CalibRows* calib, const QuantSpec& spec,
                            std::string_view name) {
  check_quant_spec(spec, k, name);
  check_finite(w, m, k, name);
  if (!calib) return;
  if (calib->n <= 0 || !calib->x) fail("{}: no calibration rows", name);
  check_finite(calib->x, calib->n, k, name);
}

// Rows are independent (each row's groups and codes are its own bytes), so threads split them.
QuantizedWeight quantize_rtn(const float* w, int64_t m, int64_t k, const QuantSpec& spec, std::string_view name) {
  check_quantizer_inputs(w, m, k, nullptr, spec, name);
  QuantizedWeight q = QuantizedWeight::zeros_like(spec.format, m, k, spec.group_size);
  const int64_t len = group_len(spec, k);
  // checked_group_params throws only for a group whose scale overflows; the first such row wins.
  std::string error;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < m; ++i) {
    try {
      for (int64_t g = 0; g < k / len; ++g) {
        const float* v = w + i * k + g * len;
        const GroupParams p = checked_group_params(spec, v, len, 1.0f, name, i, g);
        q.set_params(i, g, p);
        for (int64_t j = 0; j < len; ++j) q.set_code(i, g * len + j, quantize_value(spec.format, v[j], p));
      }
    } catch (const Error& e) {
#pragma omp critical(tf_quantize_rtn_error)
      if (error.empty()) error = e.what();
    }
  }
  if (!error.empty()) throw Error(error);
  return q;
}

}  // namespace tf
