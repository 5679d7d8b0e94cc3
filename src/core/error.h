// Errors: a user's mistake (bad file, bad field, bad request) is reported as tf::Error with a
// message naming the thing at fault; internal invariants use TF_ASSERT, which stays on in
// every build type (a wrong answer is worse than an abort).
#pragma once

#include <fmt/format.h>

#include <new>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tf {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

// Runs `load`, which reads the file at `path`, and reports an allocation that the file's
// contents made impossible (std::bad_alloc, std::length_error) as a tf::Error naming the file.
// The loaders bound every size they read before allocating from it; this is the backstop that
// keeps a size they missed from surfacing as a bare "std::bad_alloc".
template <typename F>
auto load_guarded(std::string_view path, F&& load) -> decltype(load()) {
  try {
    return load();
  } catch (const std::bad_alloc&) {
    fail("{}: out of memory while loading this file (a size or count in it is too large)", path);
  } catch (const std::length_error& e) {
    fail("{}: a size or count in this file is too large ({})", path, e.what());
  }
}

[[noreturn]] void assert_failed(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace tf

#define TF_ASSERT(cond, ...)                                                        \
  do {                                                                              \
    if (!(cond)) ::tf::assert_failed(#cond, __FILE__, __LINE__, fmt::format("" __VA_ARGS__)); \
  } while (0)
