// Helpers shared by tests: paths of bundled data, JSON loading.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "core/error.h"

namespace tf::test {

inline std::string source_path(const std::string& rel) { return std::string(TF_SOURCE_DIR) + "/" + rel; }
inline std::string model_dir(const std::string& name) { return source_path("models/" + name); }
inline std::string data_path(const std::string& rel) { return source_path("tests/data/" + rel); }

inline nlohmann::json load_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  return nlohmann::json::parse(in);
}

// Runs f, which must throw tf::Error, and returns its message (a failure if it does not throw).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const ::tf::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a tf::Error";
  return "";
}

// A fixture with a fresh temporary folder per test (removed afterwards), named after the
// test so parallel ctest runs do not collide.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = "tf_test_" + std::to_string(::getpid()) + "_" + t->test_suite_name() + "_" + t->name();
    // Parameterized names hold '/' ("Prefix/Suite", "Test/0"): one folder, not nested ones
    // whose parents TearDown would leave behind.
    std::replace(name.begin(), name.end(), '/', '_');
    dir_ = std::filesystem::temp_directory_path() / name;
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

}  // namespace tf::test

#define EXPECT_CONTAINS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)
