// The launcher's environment: torchrun-style and OpenMPI variables, a lone process, and
// malformed values named in the error.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "dist/launch_env.h"
#include "test_util.h"

namespace tf {
namespace {

LaunchEnv read(const std::map<std::string, std::string>& env) {
  return read_launch_env([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(LaunchEnv, LoneProcessIsRankZeroOfOne) {
  const LaunchEnv e = read({});
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
  EXPECT_EQ(e.local_rank, 0);
  EXPECT_EQ(e.launcher, "none");
}

TEST(LaunchEnv, TorchrunStyle) {
  const LaunchEnv e = read({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}});
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.launcher, "torchrun");
}

TEST(LaunchEnv, OpenMpiMpirun) {
  const LaunchEnv e = read({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                            {"OMPI_COMM_WORLD_LOCAL_RANK", "3"}});
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 3);
  EXPECT_EQ(e.launcher, "mpirun");
}

TEST(LaunchEnv, MalformedValuesAreNamed) {
  EXPECT_CONTAINS(test::error_of([] { read({{"RANK", "x"}, {"WORLD_SIZE", "2"}}); }), "RANK='x'");
  EXPECT_CONTAINS(test::error_of([] { read({{"RANK", "2"}, {"WORLD_SIZE", "2"}}); }), "RANK=2 is outside WORLD_SIZE=2");
  EXPECT_CONTAINS(test::error_of([] { read({{"WORLD_SIZE", "2"}}); }), "WORLD_SIZE is set without RANK");
  EXPECT_CONTAINS(test::error_of([] { read({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_RANK", "-1"}}); }), "LOCAL_RANK='-1'");
}

}  // namespace
}  // namespace tf
