// A one-line progress bar on stderr for long work (loading, perplexity). Draws only when
// stderr is a terminal, or when forced, and at most ~10 times a second.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace tf {

class ProgressBar {
 public:
  ProgressBar(std::string label, int64_t total);
  ~ProgressBar();
  void update(int64_t done, const std::string& suffix = "");
  void finish(const std::string& suffix = "");

 private:
  void draw(int64_t done, const std::string& suffix);
  std::string label_;
  int64_t total_;
  bool enabled_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace tf
