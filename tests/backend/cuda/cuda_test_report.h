// The per-op pass/fail table that test_cuda_ops prints after gtest's summary: every
// comparison of a CUDA result against its reference records its error and tolerance here.
#pragma once

#include <string>

namespace tf::test {

// One comparison of `op`: `metric` names the error measure, `err` its value, `tol` the bound.
void record(const std::string& op, const std::string& metric, double err, double tol, bool passed);
// true if a CUDA device is usable (the tests skip, loudly, without one).
bool have_cuda_device();

}  // namespace tf::test

#define TF_REQUIRE_CUDA_DEVICE() \
  if (!::tf::test::have_cuda_device()) GTEST_SKIP() << "no usable CUDA device"
