// The CUDA backend's PDL switches by step kind (src/backend/cuda/pdl_policy.h), a host-only
// function, checked on every machine: the defaults keep decode steps in plain stream order
// except for the grid-sized kernels (pdl_decode_resident) and prefill steps overlapped except
// for those; pdl_decode_resident touches the grid-sized kernels of decode steps only; with it
// off, every combination of the other switches gives what the backend computed before the
// switch existed (plain: pdl and (pdl_decode or not decode); grid-sized: that and
// pdl_resident). The second recording a recorded step is timed against (pdl_trial) has PDL
// for every kernel, and none is made where the step has that already or pdl / pdl_timed is
// off. It lives here, not in tests/backend/cuda, whose tests are built only with TF_CUDA.
#include <gtest/gtest.h>

#include "backend/cuda/pdl_policy.h"

namespace tf::cuda {
namespace {

TEST(PdlPolicy, DefaultsByStepKind) {
  const BackendOptions o;
  const PdlSwitches decode = pdl_switches(o, true), prefill = pdl_switches(o, false);
  EXPECT_FALSE(decode.plain);
  EXPECT_TRUE(decode.resident);
  EXPECT_TRUE(prefill.plain);
  EXPECT_FALSE(prefill.resident);
}

TEST(PdlPolicy, DecodeResidentTouchesOnlyDecodeStepsGridSizedKernels) {
  BackendOptions o;
  o.pdl_decode_resident = false;
  const PdlSwitches decode_off = pdl_switches(o, true), prefill_off = pdl_switches(o, false);
  o.pdl_decode_resident = true;
  const PdlSwitches decode = pdl_switches(o, true), prefill = pdl_switches(o, false);
  EXPECT_FALSE(decode_off.resident);
  EXPECT_TRUE(decode.resident);
  EXPECT_EQ(decode.plain, decode_off.plain);
  EXPECT_EQ(prefill, prefill_off);
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

TEST(PdlPolicy, TrialRecordingHasPdlEverywhere) {
  const PdlSwitches all{.plain = true, .resident = true};
  for (int bits = 0; bits < 64; ++bits) {
    BackendOptions o;
    o.pdl = bits & 1;
    o.pdl_decode = bits & 2;
    o.pdl_resident = bits & 4;
    o.pdl_decode_resident = bits & 8;
    o.pdl_timed = bits & 16;
    const PdlSwitches step = pdl_switches(o, bits & 32);
    const std::optional<PdlSwitches> trial = pdl_trial(o, step);
    const bool expected = o.pdl && o.pdl_timed && step != all;
    ASSERT_EQ(trial.has_value(), expected) << "options " << bits;
    if (trial) {
      EXPECT_EQ(*trial, all) << "options " << bits;
    }
  }
  // On by default: both kinds of recorded step are timed both ways, decode steps and
  // verification steps (not decode: the plain kernels with PDL, the grid-sized ones without).
  BackendOptions o;
  EXPECT_TRUE(pdl_trial(o, pdl_switches(o, true)).has_value());
  EXPECT_TRUE(pdl_trial(o, pdl_switches(o, false)).has_value());
  o.pdl_timed = false;
  EXPECT_FALSE(pdl_trial(o, pdl_switches(o, true)).has_value());
}

}  // namespace
}  // namespace tf::cuda
