#include "tools/chat_input.h"

#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>

#include "core/error.h"

namespace tf::cli {

namespace {

// Lock-free, so safe to touch in a signal handler.
std::atomic<int64_t> g_interrupts{0};
static_assert(std::atomic<int64_t>::is_always_lock_free);

extern "C" void on_sigint(int) { g_interrupts.fetch_add(1, std::memory_order_relaxed); }

constexpr int kPollMs = 100;

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

void print_prompt(const std::string& p) {
  if (p.empty()) return;
  std::fputs(p.c_str(), stdout);
  std::fflush(stdout);
}

}  // namespace

void catch_interrupts() {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
}

int64_t n_interrupts() { return g_interrupts.load(std::memory_order_relaxed); }

void LineInput::forget_interrupts() { interrupts_seen_ = n_interrupts(); }

LineInput::Status LineInput::next(std::string& line) {
  for (;;) {
    if (const size_t nl = buf_.find('\n'); nl != std::string::npos) {
      line.assign(buf_, 0, nl);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      buf_.erase(0, nl + 1);
      return Status::Line;
    }
    if (eof_) {
      if (buf_.empty()) return Status::Eof;
      line = std::move(buf_);
      buf_.clear();
      return Status::Line;
    }
    if (const int64_t n = n_interrupts(); n != interrupts_seen_) {
      interrupts_seen_ = n;
      return Status::Interrupted;
    }
    pollfd p{.fd = STDIN_FILENO, .events = POLLIN, .revents = 0};
    const int ready = ::poll(&p, 1, kPollMs);
    if (ready < 0 && errno != EINTR) fail("cannot read standard input: poll failed");
    if (ready <= 0) continue;
    char chunk[4096];
    const ssize_t got = ::read(STDIN_FILENO, chunk, sizeof chunk);
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      fail("cannot read standard input");
    }
    if (got == 0) {
      eof_ = true;
    } else {
      buf_.append(chunk, size_t(got));
    }
  }
}

LineInput::Status read_message(LineInput& in, const std::string& prompt, const std::string& more,
                               std::string& message) {
  message.clear();
  std::string line;
  print_prompt(prompt);
  LineInput::Status st = in.next(line);
  if (st != LineInput::Status::Line) return st;

  if (line.rfind("\"\"\"", 0) == 0) {  // a """ block
    // A """ alone on the opening or closing line adds no newline of its own.
    line.erase(0, 3);
    for (bool first = true;; first = false) {
      if (ends_with(line, "\"\"\"")) {
        line.resize(line.size() - 3);
        if (line.empty() && !message.empty()) message.pop_back();
        message += line;
        return LineInput::Status::Line;
      }
      if (!(first && line.empty())) {
        message += line;
        message += '\n';
      }
      print_prompt(more);
      st = in.next(line);
      if (st == LineInput::Status::Interrupted) return st;
      if (st == LineInput::Status::Eof) return LineInput::Status::Line;  // an unclosed block ends with the input
    }
  }
  while (ends_with(line, "\\")) {  // backslash continuation
    message.append(line, 0, line.size() - 1);
    message += '\n';
    print_prompt(more);
    st = in.next(line);
    if (st == LineInput::Status::Interrupted) return st;
    if (st == LineInput::Status::Eof) return LineInput::Status::Line;
  }
  message += line;
  return LineInput::Status::Line;
}

}  // namespace tf::cli
