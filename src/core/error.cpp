#include "core/error.h"

#include <cstdio>
#include <cstdlib>

namespace tf {

void assert_failed(const char* expr, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "twofold: internal error: assertion `%s` failed at %s:%d%s%s\n", expr, file,
               line, msg.empty() ? "" : ": ", msg.c_str());
  std::abort();
}

}  // namespace tf
