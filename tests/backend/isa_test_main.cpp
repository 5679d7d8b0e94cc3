// main() of the CPU backend's op tests: runs every test once per ISA level the build has
// kernels for and this machine runs (src/backend/cpu/isa.h), lowest first, so each kernel
// is checked against the reference at every level. With TF_CPU_ISA set, only that level.
// Each pass starts with a line naming its level.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "backend/cpu/isa.h"

namespace {

class IsaPerIteration : public ::testing::EmptyTestEventListener {
  void OnTestIterationStart(const ::testing::UnitTest&, int iteration) override {
    const auto& levels = tf::cpu::supported_isas();
    const char* env = std::getenv("TF_CPU_ISA");
    if (!(env && *env)) tf::cpu::set_active_isa(levels[size_t(iteration) % levels.size()]);
    std::printf("[ ISA      ] %s\n", tf::cpu::isa_report().c_str());
    std::fflush(stdout);
  }
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const char* env = std::getenv("TF_CPU_ISA");
  if (!(env && *env) && GTEST_FLAG_GET(repeat) == 1) GTEST_FLAG_SET(repeat, int(tf::cpu::supported_isas().size()));
  ::testing::UnitTest::GetInstance()->listeners().Append(new IsaPerIteration);
  return RUN_ALL_TESTS();
}
