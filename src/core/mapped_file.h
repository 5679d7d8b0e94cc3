// A read-only memory-mapped file. Weights are used in place from the page cache, so loading
// a model costs no copy and the OS shares pages between processes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tf {

class MappedFile {
 public:
  // Throws tf::Error naming the path if it cannot be opened or mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Reads a whole (small) text file; throws tf::Error naming the path on failure.
std::string read_text_file(const std::string& path);
bool file_exists(const std::string& path);

}  // namespace tf
