// The CUDA backend's PDL switches by step kind (src/backend/cuda/pdl_policy.h), a host-only
// function, checked on every machine: the defaults keep decode steps in plain stream order
// and prefill steps overlapped except for the grid-sized kernels; pdl_decode_resident turns
// PDL on for the grid-sized kernels of decode steps only; with it off, every combination of
// the other switches gives what the backend computed before the switch existed (plain: pdl
// and (pdl_decode or not decode); grid-sized: that and pdl_resident). It lives here, not in
// tests/backend/cuda, whose tests are built only with TF_CUDA.
#include <gtest/gtest.h>

#include "backend/cuda/pdl_policy.h"

namespace tf::cuda {
namespace {

TEST(PdlPolicy, DefaultsByStepKind) {
  const BackendOptions o;
  const PdlSwitches decode = pdl_switches(o, true), prefill = pdl_switches(o, false);
  EXPECT_FALSE(decode.plain);
  EXPECT_FALSE(decode.resident);
  EXPECT_TRUE(prefill.plain);
  EXPECT_FALSE(prefill.resident);
}

TEST(PdlPolicy, DecodeResidentTouchesOnlyDecodeStepsGridSizedKernels) {
  BackendOptions o;
  o.pdl_decode_resident = true;
  const PdlSwitches decode = pdl_switches(o, true), prefill = pdl_switches(o, false);
  EXPECT_FALSE(decode.plain);
  EXPECT_TRUE(decode.resident);
  EXPECT_TRUE(prefill.plain);
  EXPECT_FALSE(prefill.resident);
  o.pdl = false;
  EXPECT_FALSE(pdl_switches(o, true).resident) << "pdl off turns every switch off";
}

TEST(PdlPolicy, WithoutTheNewSwitchEqualsTheEarlierRule) {
  for (int bits = 0; bits < 16; ++bits) {
    BackendOptions o;
    o.pdl = bits & 1;
    o.pdl_decode = bits & 2;
    o.pdl_resident = bits & 4;
    o.pdl_decode_resident = false;
    const bool decode = bits & 8;
    const bool plain = o.pdl && (o.pdl_decode || !decode);
    const PdlSwitches s = pdl_switches(o, decode);
    EXPECT_EQ(s.plain, plain) << "options " << bits;
    EXPECT_EQ(s.resident, plain && o.pdl_resident) << "options " << bits;
  }
}

}  // namespace
}  // namespace tf::cuda
