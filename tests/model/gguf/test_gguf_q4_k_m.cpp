// tiny-main quantized to Q4_K_M by llama.cpp's llama-quantize (models/gguf/README.md): Q4_K,
// Q5_K, Q6_K and Q8_0 matrices. The ctest fixture gguf_q4_k_m_reference runs
// q4_k_m_reference.py first: last-position logits of a float32 numpy forward pass over
// gguf.quants.dequantize'd weights, written without twofold, for the golden prompts' ids.
// twofold runs the file on the CPU backend dequantized at load (--dequantize) and in its blocks
// (the default: every one of those types on the integer kernels, kernels/qmatmul.cpp), at
// the best ISA level of this machine.
#include <gtest/gtest.h>

#include <fstream>

#include "backend/backend.h"
#include "engine/golden_util.h"
#include "model/arch/registry.h"
#include "twofold/engine.h"

namespace tf {
namespace {

// Dequantized: both sides compute in float32 over the same weights and differ only in
// summation order and RoPE angles (as tests/model/gguf/test_gguf_smollm2.cpp). Measured:
// 5.9e-7-7.6e-7 relative L2.
constexpr double kLogitTol = 1e-4;
// In blocks, the integer kernels round the activations per block of 32 to 16 bits (two int8
// planes; step max|x| / 32258). Measured, worst over the prompts: 5.5e-5 (baseline), 4.5e-5
// (AVX2), 4.3e-5 (AVX-512, VNNI), against 6e-7 dequantized; bound with about 10x room.
constexpr double kBlocksTol = 5e-4;

std::vector<float> reference_logits(const std::string& name) {
  const std::string path = std::string(TF_Q4_K_M_REF_DIR) + "/" + name + ".logits.f32";
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  EXPECT_TRUE(f) << "cannot open " << path;
  std::vector<float> v(size_t(f.tellg()) / sizeof(float));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * sizeof(float)));
  return v;
}

TEST(TinyMainQ4KM, HoldsTheKTypesTheKernelsRunInBlocks) {
  const nlohmann::json j = test::load_json(std::string(TF_Q4_K_M_REF_DIR) + "/q4_k_m.json");
  for (const char* t : {"Q4_K", "Q5_K", "Q6_K", "Q8_0"}) EXPECT_GT(j["tensor_types"].value(t, 0), 0) << t;
  const auto cpu = make_backend(BackendKind::Cpu);
  for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_0}) EXPECT_TRUE(cpu->reads_gguf_block(t)) << dtype_name(t);
}

TEST(TinyMainQ4KM, LogitsEqualAFloat32ForwardOverTheGgufPackagesDequantization) {
  const nlohmann::json j = test::load_json(std::string(TF_Q4_K_M_REF_DIR) + "/q4_k_m.json");
  const std::string path = test::source_path("models/gguf/tiny-main-q4_k_m.gguf");
  for (bool dequantize : {true, false}) {
    Engine e(EngineOptions{.model_dir = path, .weights = {.dequantize_gguf = dequantize}, .max_seqs = 1});
    double worst = 0;
    for (const auto& p : j["prompts"]) {
      const std::vector<float> ref = reference_logits(p["name"]);
      ASSERT_EQ(ref.size(), size_t(e.config().n_vocab)) << p["name"];
      const std::vector<float> got = e.score(p["input_ids"].get<std::vector<int32_t>>(), /*all_positions=*/false);
      ASSERT_EQ(got.size(), ref.size());
      worst = std::max(worst, test::rel_l2(got.data(), ref.data(), ref.size()));
    }
    std::printf("[ measured ] %s: worst relative L2 of the last logits %.3g\n", dequantize ? "dequantized" : "in blocks",
                worst);
    EXPECT_LE(worst, dequantize ? kLogitTol : kBlocksTol);
  }
}

}  // namespace
}  // namespace tf
