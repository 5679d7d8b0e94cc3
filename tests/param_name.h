// gtest parameter names from string parameters: '-' is not allowed in a test name, so it
// becomes '_' ("qwen3-moe" -> "qwen3_moe"). Pass test::ParamName() to INSTANTIATE_TEST_SUITE_P.
#pragma once

#include <gtest/gtest.h>

#include <string>

namespace tf::test {

struct ParamName {
  template <class P>
  std::string operator()(const ::testing::TestParamInfo<P>& info) const {
    std::string n = info.param;
    for (char& c : n)
      if (c == '-') c = '_';
    return n;
  }
};

}  // namespace tf::test
