// Replays fuzz inputs without libFuzzer: feeds each file named on the command line, and each
// file of each folder named there (sorted, not recursive), to LLVMFuzzerTestOneInput once.
// Every build compiles this against each harness (tests/fuzz/CMakeLists.txt), so the seed
// corpora and past crash inputs run in every ctest run, gcc builds included. A harness signals
// a bug by crashing (assertion, sanitizer, uncaught exception), as under libFuzzer.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

namespace fs = std::filesystem;

std::vector<fs::path> inputs_of(const fs::path& arg) {
  if (!fs::is_directory(arg)) return {arg};
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(arg)) {
    if (e.is_regular_file()) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE_OR_FOLDER...\n", argv[0]);
    return 2;
  }
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  size_t n = 0;
  for (int i = 1; i < argc; ++i) {
    for (const fs::path& path : inputs_of(argv[i])) {
      std::ifstream in(path, std::ios::binary);
      if (!in) {
        std::fprintf(stderr, "cannot read %s\n", path.c_str());
        return 1;
      }
      // An exact-size heap copy, so ASan builds see a read past the input's end.
      std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
      std::fprintf(stderr, "%s (%zu bytes)\n", path.c_str(), bytes.size());
      auto data = std::make_unique<uint8_t[]>(bytes.size());
      std::copy(bytes.begin(), bytes.end(), data.get());
      LLVMFuzzerTestOneInput(data.get(), bytes.size());
      ++n;
    }
  }
  if (n == 0) {
    std::fprintf(stderr, "no inputs found in the arguments: an empty corpus tests nothing\n");
    return 1;
  }
  std::printf("replayed %zu inputs\n", n);
  return 0;
}
