// Errors: a user's mistake (bad file, bad field, bad request) is reported as tf::Error with a
// message naming the thing at fault; internal invariants use TF_ASSERT, which stays on in
// every build type (a wrong answer is worse than an abort).
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace tf {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

[[noreturn]] void assert_failed(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace tf

#define TF_ASSERT(cond, ...)                                                        \
  do {                                                                              \
    if (!(cond)) ::tf::assert_failed(#cond, __FILE__, __LINE__, fmt::format("" __VA_ARGS__)); \
  } while (0)
