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

}  // namespace
}  // namespace tf
