// Test helper: a suite whose tests share one engine over tiny-main, made before the suite's
// first test and destroyed after its last (`class MySuite : public test::TinyEngineSuite {}`).
#pragma once

#include <gtest/gtest.h>

#include "test_util.h"
#include "twofold/engine.h"

namespace tf::test {

class TinyEngineSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { engine_ = new Engine(EngineOptions{.model_dir = model_dir("tiny-main")}); }
  static void TearDownTestSuite() {
    delete engine_;
    engine_ = nullptr;
  }
  static inline Engine* engine_ = nullptr;
};

}  // namespace tf::test
