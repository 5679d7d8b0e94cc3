#include "core/progress.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace tf {

ProgressBar::ProgressBar(std::string label, int64_t total)
    : label_(std::move(label)), total_(total) {
  const char* force = std::getenv("TF_PROGRESS");
  enabled_ = force ? std::atoi(force) != 0 : ::isatty(STDERR_FILENO) != 0;
  start_ = last_draw_ = std::chrono::steady_clock::now();
}

ProgressBar::~ProgressBar() {
  if (!finished_) finish();
}

void ProgressBar::update(int64_t done, const std::string& suffix) {
  auto now = std::chrono::steady_clock::now();
  if (done < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  draw(done, suffix);
}

void ProgressBar::draw(int64_t done, const std::string& suffix) {
  if (!enabled_) return;
  constexpr int kWidth = 30;
  double frac = total_ > 0 ? double(done) / double(total_) : 1.0;
  int filled = int(frac * kWidth);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::string bar(size_t(filled), '#');
  bar.append(size_t(kWidth - filled), '.');
  std::fprintf(stderr, "\r%s [%s] %lld/%lld %.1fs %s\x1b[K", label_.c_str(), bar.c_str(),
               (long long)done, (long long)total_, secs, suffix.c_str());
  std::fflush(stderr);
}

void ProgressBar::finish(const std::string& suffix) {
  finished_ = true;
  if (!enabled_) return;
  draw(total_, suffix);
  std::fputc('\n', stderr);
}

}  // namespace tf
