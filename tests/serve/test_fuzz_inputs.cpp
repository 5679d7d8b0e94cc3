// Every input in a fuzz harness's seed corpus (tests/fuzz/corpus/<name>/), the crash inputs
// the fuzzers found included (crash_*), run through the harness itself in the ordinary test
// build. The harness's own checks (a body over the limit, an accepted request out of its
// documented ranges: __builtin_trap) and the absence of any crash are what is tested; this
// binary is linked with one harness (TF_FUZZ_CORPUS names its corpus).
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

TEST(FuzzCorpus, EveryInputRunsThroughTheHarness) {
  int n_inputs = 0, n_crash_inputs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(TF_FUZZ_CORPUS)) {
    std::ifstream f(entry.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    EXPECT_EQ(LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), 0)
        << entry.path();
    ++n_inputs;
    n_crash_inputs += entry.path().filename().string().rfind("crash_", 0) == 0;
  }
  EXPECT_GE(n_inputs, 20) << TF_FUZZ_CORPUS;
  EXPECT_GE(n_crash_inputs, 1) << TF_FUZZ_CORPUS;
}

}  // namespace
