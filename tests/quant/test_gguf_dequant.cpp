// GGUF dequantization against the `gguf` Python package's gguf.quants.dequantize, bit for bit:
// make_gguf_cases.py (run by the build) writes random blocks of every supported type (finite
// f16 scales, every other byte random) and the package's float32 result.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "quant/gguf_dequant.h"
#include "test_util.h"

namespace tf {
namespace {

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class GgufDequant : public ::testing::TestWithParam<DType> {};

TEST_P(GgufDequant, EqualsPythonReferenceBitForBit) {
  const DType t = GetParam();
  const std::string name(dtype_name(t));
  const std::string dir = TF_GGUF_CASES_DIR;
  const nlohmann::json manifest = test::load_json(dir + "/dequant.json");
  ASSERT_TRUE(manifest.contains(name));
  const int64_t n = manifest[name]["elements"];
  const std::vector<uint8_t> blocks = read_bytes(dir + "/" + name + ".blocks");
  const std::vector<uint8_t> ref = read_bytes(dir + "/" + name + ".f32");
  ASSERT_EQ(ref.size(), size_t(n) * 4);
  const int64_t k = dtype_block_elems(t) * (t == DType::F32 || t == DType::F16 || t == DType::BF16 ? 32 : 1);
  ASSERT_EQ(n % k, 0);
  ASSERT_EQ(blocks.size(), dtype_row_bytes(t, k) * size_t(n / k));
  ASSERT_TRUE(can_dequantize(t));

  // As rows of one block (or 32 elements) each, over the threads, and as one long row.
  std::vector<float> rows(static_cast<size_t>(n)), one(static_cast<size_t>(n));
  dequantize_rows(t, blocks.data(), rows.data(), n / k, k);
  dequantize_row(t, blocks.data(), one.data(), n);
  size_t n_diff = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t got, want, got1;
    std::memcpy(&got, &rows[size_t(i)], 4);
    std::memcpy(&got1, &one[size_t(i)], 4);
    std::memcpy(&want, ref.data() + 4 * i, 4);
    if ((got != want || got1 != want) && n_diff++ < 5)
      ADD_FAILURE() << name << " element " << i << ": got " << rows[size_t(i)] << " (0x" << std::hex << got
                    << "), reference " << std::dec << reinterpret_cast<const float*>(ref.data())[i] << " (0x"
                    << std::hex << want << ")";
  }
  EXPECT_EQ(n_diff, 0u);
}

INSTANTIATE_TEST_SUITE_P(Types, GgufDequant,
                         ::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1,
                                           DType::Q4_K, DType::Q5_K, DType::Q6_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(GgufDequantTypes, OnlyTheSupportedOnes) {
  for (DType t : {DType::I8, DType::I32, DType::W8, DType::W4, DType::FP8}) EXPECT_FALSE(can_dequantize(t)) << dtype_name(t);
}

}  // namespace
}  // namespace tf
