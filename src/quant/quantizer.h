// Weight quantizers over one linear layer: a weight matrix w [m, k] (row-major F32,
// [out_features, in_features]) and, for the calibrated methods, rows of the layer's input
// seen on calibration text, x [n, k] (CaptureBackend records them). Each returns the
// quantized weight in one of the formats of quant/formats.h, named `name` in errors.
//
//   RTN   round to nearest with each group's min/max parameters (quant/group_quant.h).
//   AWQ   activation-aware scaling (Lin et al. 2023): input channels that carry large
//         activations are scaled up before rounding, w' = w * s (per column), so their
//         weights lose less relative precision; the layer then needs x / s as its input.
//         s = mean|x|^alpha (normalised), alpha searched on a grid for the least output
//         error ||x w^T - (x / s) Q(w s)^T||, then each group's range is clipped by the
//         ratio with the least output error on that group's share of the product.
//   GPTQ  error compensation (Frantar et al. 2022): columns are rounded one at a time and
//         each column's rounding error is spread onto the columns not yet rounded, weighted
//         by the inverse Hessian H = 2 x^T x / n of the layer's squared output error, so
//         later columns absorb what earlier ones lost. Columns in order, or by decreasing
//         H_jj (act-order) with each group's parameters fixed beforehand (static groups), so
//         groups stay contiguous along k as the layouts want.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "quant/group_quant.h"
#include "quant/quantized_weight.h"

namespace tf {

// Calibration rows of one layer's input.
struct CalibRows {
  const float* x = nullptr;  // [n, k]
  int64_t n = 0;
};

QuantizedWeight quantize_rtn(const float* w, int64_t m, int64_t k, const QuantSpec& spec, std::string_view name);

struct AwqParams {
  int n_grid = 20;        // alpha in {0, 1/n_grid, ..., (n_grid - 1) / n_grid}
  int n_clip = 10;        // clip ratios 1, 0.95, ..., 1 - 0.05 (n_clip - 1); 1: no clip search
  int64_t clip_rows = 128;  // calibration rows used by the clip search (the first ones)
};
struct AwqResult {
  QuantizedWeight weight;          // Q(w * s)
  std::vector<float> input_scales;  // s [k]: the layer computes (x / s) @ Q(w * s)^T
  float alpha = 0.0f;               // the exponent the grid search chose
};
// The caller folds 1 / s into whatever produces x (the RMSNorm weight before q/k/v and
// gate/up, the rows of v before o, of up before down).
AwqResult quantize_awq(const float* w, int64_t m, int64_t k, CalibRows calib, const QuantSpec& spec,
                       std::string_view name, const AwqParams& params = {});

struct GptqParams {
  double damp = 0.01;      // added to H's diagonal, times the mean of the diagonal
  int64_t block = 128;     // columns per lazy batch (raised to the group size when smaller)
  // Columns in order of decreasing H_jj (the inputs of most energy rounded first). The
  // groups stay contiguous in the original order, so it implies static groups.
  bool act_order = false;
  // W4 groups' parameters taken from the original weights before any column is updated
  // (otherwise when the group's first column comes up, from the updated columns). W8/FP8
  // rows always take theirs from the original row.
  bool static_groups = false;
  // Static parameters: clip ratios tried, 1, 0.95, ..., each group taking the one of least
  // sum_j H_jj (w_j - Q(w_j))^2 (1: no clipping).
  int n_clip = 1;
  // W4: rounds of the scale and zero-point refit (refit_w4_params below) after GPTQ. Round 1
  // refits the parameters of GPTQ's codes; each further round runs GPTQ again with the
  // refitted parameters as its static groups and refits those codes. Each row keeps the
  // codes and parameters of the round with its least H-weighted error. 0: none.
  int refit_rounds = 0;
  // W4: rounds of coordinate descent on the codes after GPTQ (and the refit rounds above):
  // each round runs descend_w4_codes (below) to a pass without change (at most 8 passes),
  // then refit_w4_params, both on H + cd_damp * mean(diag H) * I. 0: none.
  int cd_rounds = 0;
  double cd_damp = 0.0;
};
QuantizedWeight quantize_gptq(const float* w, int64_t m, int64_t k, CalibRows calib, const QuantSpec& spec,
                              std::string_view name, const GptqParams& params = {});

// W4: with the codes of q fixed, each row's group scales and zero points refitted for the
// least H-weighted error e^T H e, e = w_i - w'_i (w [m, k] the original weights, h [k, k]
// the symmetric Hessian of the layer's inputs, e.g. x^T x): the least-squares (scale, offset)
// of every group of the row jointly, zeros rounded into 0..15, then the scales alone again
// with those zeros, rounded to F16. A row keeps its old parameters unless the refitted ones
// lower its error, so no row's error increases. Returns each row's error afterwards.
std::vector<double> refit_w4_params(const float* w, const float* h, QuantizedWeight& q, bool symmetric);
// W4: with every group's scale and zero point fixed, coordinate descent on the codes of q
// for the least H-weighted error e^T H e of each row (w, h as for refit_w4_params): cyclic
// passes over the columns, each code set to the one nearest the value that minimises the
// error given all the other codes (the current value plus (H e)_j / H_jj), clamped to 0..15;
// a code moves only when that strictly lowers the row's error, so no row's error increases
// and a row whose codes already represent it exactly stays. Stops after a pass that moved
// nothing, or after max_passes. Returns the number of code changes.
int64_t descend_w4_codes(const float* w, const float* h, QuantizedWeight& q, int max_passes);
// e^T H e for row `row` of q against w [k] (the row's original weights), h as above.
double h_weighted_row_error(const float* w, const float* h, const QuantizedWeight& q, int64_t row);

// The checks every quantizer runs first: spec against k, finite weights, and with `calib`
// at least one finite calibration row of k features. tf::Error naming `name`.
void check_quantizer_inputs(const float* w, int64_t m, int64_t k, const CalibRows* calib, const QuantSpec& spec,
                            std::string_view name);

// ||x a^T - x b^T||_F / ||x a^T||_F over the calibration rows: the relative output error of
// using weights b [m, k] in place of a [m, k].
double relative_output_error(const float* a, const float* b, int64_t m, int64_t k, CalibRows calib);

}  // namespace tf
