// Runs the built `twofold` binary the way a user or a script does, capturing stdout, stderr
// and the exit status.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/golden_util.h"
#include "test_util.h"

namespace tf::test {

struct CliResult {
  int exit_code = -1;      // -1 if killed by a signal (a crash)
  int signal = 0;
  std::string out, err;
};

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

inline CliResult run_twofold(const std::string& args) {
  static int counter = 0;
  const auto dir = std::filesystem::temp_directory_path();
  const std::string err_path = (dir / ("twofold_cli_err_" + std::to_string(::getpid()) + "_" +
                                       std::to_string(counter++))).string();
  const std::string cmd = std::string(TF_BINARY_DIR) + "/tools/twofold " + args + " 2>" + err_path;
  CliResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = ::pclose(p);
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  std::ifstream e(err_path);
  std::stringstream ss;
  ss << e.rdbuf();
  r.err = ss.str();
  std::filesystem::remove(err_path);
  return r;
}

// `twofold logits -m MODEL` on tiny-main's third golden prompt gives transformers' prompt ids
// and last-position logits within relative L2 `max_rel_l2` (MODEL: a folder or a GGUF file).
inline void expect_logits_verb_matches_golden(const std::string& model, double max_rel_l2) {
  const auto g = load_golden("tiny-main")[2];
  const auto r = run_twofold("logits -m " + model + " -p " + shell_quote(g.text));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["ids"].get<std::vector<int32_t>>(), g.input_ids);
  const auto logits = j["logits"].get<std::vector<float>>();
  ASSERT_EQ(logits.size(), g.last_logits.size());
  EXPECT_LE(rel_l2(logits.data(), g.last_logits.data(), logits.size()), max_rel_l2);
}

}  // namespace tf::test
