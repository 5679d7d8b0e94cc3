// Helpers shared by the fuzz harnesses.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "core/error.h"

namespace tf::fuzz {

// The input as a file the loaders can open by path, kept in memory (memfd) so that fuzzing
// writes nothing to disk: its path is /proc/self/fd/N, valid while the object lives.
class MemFile {
 public:
  MemFile(const uint8_t* data, size_t size) {
    fd_ = ::memfd_create("tf_fuzz_input", 0);
    TF_ASSERT(fd_ >= 0, "memfd_create failed");
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ::write(fd_, data + done, size - done);
      TF_ASSERT(n > 0, "writing the memfd failed");
      done += size_t(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { ::close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;

  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace tf::fuzz
