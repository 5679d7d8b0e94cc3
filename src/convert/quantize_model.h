// `twofold quantize`: a 16-bit model folder -> a quantized one (docs/QUANT.md, "Quantized model
// folders"), every linear weight (weight_table.h is_linear_role; the LM head on request) in
// one layout of src/quant/formats.h, by round-to-nearest, AWQ or GPTQ (quant/quantizer.h),
// with the calibration rows of each layer's input recorded on the 16-bit model
// (quant/capture_backend.h). A fused tensor (Phi-3's qkv_proj, gate_up_proj) is quantized
// whole, its parts' rows stacked at their split points; each expert of a mixture-of-experts
// layer is quantized alone, calibrated on the tokens the router sent it (rounded to nearest
// when it got none).
//
// AWQ's input scales s (the layer then computes (x / s) Q(w s)^T) are folded where the
// forward allows it exactly: into the RMSNorm weight before q|k|v and before gate|up, and into
// the rows of up before down (down's input is silu(gate) * up). The o projection's input is
// the attention output, a mix of v rows across query heads sharing a KV head: it gets
// round-to-nearest under --method awq.
//
// Sensitivity: each linear weight quantized alone (the others 16-bit) and the model's
// perplexity on the calibration text measured; with keep_16bit_auto the most sensitive are
// kept 16-bit, one at a time, until the whole model's perplexity increase is within
// max_ppl_increase.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace tf {

struct QuantizeParams {
  std::string in_dir, out_dir;
  DType format = DType::W4;            // W8, W4 or FP8
  int32_t group_size = 128;            // W4 (lowered for a weight whose input dimension it does not divide)
  std::string method = "rtn";          // rtn | awq | gptq | awq-gptq (AWQ's scales, then GPTQ on w * s)
  bool symmetric = false;              // int4: every zero point 8
  // GPTQ: damping, act-order (implies static groups), static groups, clip ratios searched
  // for the static groups, rounds of the int4 scale and zero-point refit, rounds of
  // coordinate descent on the int4 codes and its damping (quant/quantizer.h GptqParams).
  double gptq_damp = 0.01;
  bool act_order = false;
  bool static_groups = false;
  int gptq_clip = 1;
  int gptq_refit = 0;
  int gptq_cd = 0;
  double gptq_cd_damp = 0.0;
  // Calibration rows of layer l recorded on the model whose layers before l are already
  // quantized (as written), instead of all on the 16-bit model.
  bool sequential = false;
  std::vector<int32_t> calib_ids;      // calibration tokens (awq, gptq, the sensitivity table)
  int64_t calib_rows = 512;            // rows of each layer's input the quantizers use
  int64_t calib_skip_first = 0;        // positions left out at the start of each calibration window
  int32_t eval_window = 256;           // tokens per window of the calibration perplexity
  bool quantize_lm_head = false;       // an untied LM head too (a tied one is the embedding: 16-bit)
  std::vector<std::string> keep_16bit;  // modules stored 16-bit ("model.layers.0.mlp.down_proj")
  bool keep_16bit_auto = false;        // add the most sensitive weights until max_ppl_increase holds
  double max_ppl_increase = 1.0;       // percent, for keep_16bit_auto
  bool sensitivity = true;             // measure the per-weight table (needs calib_ids)
  std::function<void(const std::string& what, int64_t done, int64_t total)> progress;  // may be empty
};

// One linear weight of the forward (q|k|v, o, gate|up, down, LM head of a layer).
struct WeightReport {
  std::string name;           // "layer 3 wqkv", "layer 1 expert 2 wdown", "lm_head"
  std::string how;            // "int4 g128 awq", "16-bit"
  double output_error = -1;   // relative output error on the calibration rows (quantizer.h); -1 unmeasured
  double ppl_alone = 0;       // calibration perplexity with only this weight quantized; 0 unmeasured
  bool kept_16bit = false;
};

struct QuantizeReport {
  std::vector<WeightReport> weights;
  double ppl_16bit = 0, ppl_quantized = 0;  // on the calibration text (0: not measured)
  int64_t bytes_in = 0, bytes_out = 0;      // of the safetensors written / read
};

// Reads p.in_dir (a dense safetensors folder), writes p.out_dir (created; config.json with
// quantization_config, model.safetensors, the tokenizer and other small files copied).
// Throws tf::Error naming the folder, tensor or option at fault.
QuantizeReport quantize_model(const QuantizeParams& p);

// The report as text lines: the per-weight table, then the totals.
std::vector<std::string> format_report(const QuantizeReport& r);

}  // namespace tf
