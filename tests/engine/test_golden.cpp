// End-to-end correctness against Hugging Face transformers: prompt ids, last-position
// logits (relative L2 error <= 1e-4), argmax at every prompt position, and greedy
// continuations, through the same Engine that `twofold generate` uses; the cpu backend at
// each ISA level its kernels are built for and the machine runs.
#include <gtest/gtest.h>

#include "backend/cpu/isa.h"
#include "engine/golden_check.h"
#include "model/config.h"
#include "twofold/engine.h"

namespace tf {
namespace {

struct Case {
  std::string model;
  std::string backend;
  cpu::Isa isa = cpu::Isa::Baseline;  // cpu backend: the kernels' ISA level (forced for the test)
};

// Every model on the cpu backend at every ISA level this build and machine have; tiny-main,
// qwen2 and the parity models of the other architectures on the reference backend.
std::vector<Case> cases() {
  std::vector<Case> v;
  for (cpu::Isa isa : cpu::supported_isas())
    for (const char* model :
         {"tiny-main", "tiny-draft", "llama-mha", "llama3-rope", "qwen2", "qwen3", "gemma3", "phi3", "mixtral",
          "qwen3-moe", "qwen3-moe-sparse"})
      v.push_back({model, "cpu", isa});
  for (const char* model : {"tiny-main", "llama3-rope", "qwen2", "qwen3", "gemma3", "phi3", "mixtral", "qwen3-moe",
                            "qwen3-moe-sparse"})
    v.push_back({model, "ref"});
  return v;
}

class GoldenTest : public ::testing::TestWithParam<Case> {};

// F32 compute over the stored weights; the goldens are float32 (TF32 off) and rounded to 6
// significant digits, so 1e-4 relative L2 leaves room only for summation order.
constexpr double kLogitTol = 1e-4;
// Margins smaller than this may flip under a different summation order.
constexpr double kTieTol = 1e-3;

TEST_P(GoldenTest, LogitsAndGreedyMatchTransformers) {
  const Case c = GetParam();
  if (c.backend == "cpu") cpu::set_active_isa(c.isa);
  Engine engine(EngineOptions{.model_dir = test::golden_model_dir(c.model), .backend = c.backend,
                              .max_seqs = 4});
  test::expect_matches_golden(engine, c.model, kLogitTol, kTieTol);
}

INSTANTIATE_TEST_SUITE_P(
    Models, GoldenTest,
    ::testing::ValuesIn(cases()),
    [](const auto& info) {
      std::string n = info.param.model + "_" + info.param.backend;
      if (info.param.backend == "cpu") {
        n += '_';
        n += cpu::isa_name(info.param.isa);
      }
      for (char& ch : n) if (ch == '-') ch = '_';
      return n;
    });

}  // namespace
}  // namespace tf
