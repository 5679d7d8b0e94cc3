// Helpers of the host backends (host_backend.h) that the op tests rely on without checking.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/host_backend.h"
#include "core/dtype.h"

namespace tf {
namespace {

// load_row_f32 widens F16 with integer ops when the target has no F16C instruction: it must
// equal the compiler's _Float16 conversion bit for bit over all 65536 inputs (zeros, denormals,
// normals, infinities, NaNs with their payloads), at every offset alignment of a row.
TEST(OpsHostBackend, LoadRowF16IsExactForEveryHalf) {
  std::vector<uint16_t> all(65536 + 7);
  for (size_t i = 0; i < all.size(); ++i) all[i] = uint16_t(i);
  for (int64_t offset : {0, 1, 3}) {
    std::vector<float> got(65536);
    load_row_f32(all.data(), DType::F16, offset, 65536, got.data());
    int64_t bad = 0;
    for (int64_t i = 0; i < 65536; ++i) {
      const float want = f16_to_f32(uint16_t(i + offset));
      if (std::memcmp(&got[size_t(i)], &want, 4) != 0 && bad++ < 5)
        ADD_FAILURE() << "half 0x" << std::hex << (i + offset) << ": got " << got[size_t(i)] << " want " << want;
    }
    EXPECT_EQ(bad, 0) << "offset " << offset;
  }
}

// store_row_f32 writes what store_f32 writes, element by element, for BF16 and F16 (rounding
// to nearest even, overflow to infinity, denormals, NaNs) at every offset alignment.
TEST(OpsHostBackend, StoreRowEqualsStoreOneByOne) {
  std::vector<float> src;
  for (uint32_t bits : {0x00000000u, 0x80000000u, 0x00000001u, 0x3f800000u, 0x3f808000u, 0x3f818000u, 0x477fe000u,
                        0x477ff000u, 0x7f7fffffu, 0x7f800000u, 0xff800000u, 0x7fc00001u, 0x387fc000u, 0x33000000u}) {
    float f;
    std::memcpy(&f, &bits, 4);
    src.push_back(f);
  }
  for (int i = 0; i < 200; ++i) src.push_back(float(i - 100) * 0.37f + 1e-3f * float(i * i));
  const int64_t n = int64_t(src.size());
  for (const DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    for (const int64_t offset : {0, 1, 3}) {
      std::vector<uint8_t> got(size_t((n + offset) * 4), 0xAB), want(got);
      store_row_f32(got.data(), dtype, offset, n, src.data());
      for (int64_t i = 0; i < n; ++i) store_f32(want.data(), dtype, offset + i, src[size_t(i)]);
      EXPECT_EQ(got, want) << dtype_name(dtype) << " offset " << offset;
    }
  }
}

}  // namespace
}  // namespace tf
