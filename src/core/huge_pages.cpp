#include "core/huge_pages.h"

#include <cstdio>
#include <new>
#include <utility>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace tf {

HugePageBuffer::HugePageBuffer(size_t bytes) : size_(bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (bytes >= kHugePage) {
    // Map one huge page more than needed and start at the first 2 MiB boundary inside, so
    // every page of the buffer can be a huge page.
    const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    const size_t span = rounded + kHugePage;
    void* p = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    auto* base = static_cast<uint8_t*>(p);
    const uintptr_t addr = reinterpret_cast<uintptr_t>(base);
    uint8_t* aligned = base + ((kHugePage - addr % kHugePage) % kHugePage);
    // Give back the slack before and after the aligned range.
    if (aligned > base) munmap(base, size_t(aligned - base));
    const size_t tail = size_t(base + span - (aligned + rounded));
    if (tail) munmap(aligned + rounded, tail);
    madvise(aligned, rounded, MADV_HUGEPAGE);  // advice only: failure leaves 4 KiB pages
    data_ = aligned;
    mapped_bytes_ = rounded;
    return;
  }
#endif
  data_ = static_cast<uint8_t*>(::operator new[](bytes ? bytes : 64, std::align_val_t(64)));
}

HugePageBuffer::~HugePageBuffer() { free(); }

HugePageBuffer::HugePageBuffer(HugePageBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      mapped_bytes_(std::exchange(o.mapped_bytes_, 0)) {}

HugePageBuffer& HugePageBuffer::operator=(HugePageBuffer&& o) noexcept {
  if (this != &o) {
    free();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    mapped_bytes_ = std::exchange(o.mapped_bytes_, 0);
  }
  return *this;
}

void HugePageBuffer::free() {
  if (!data_) return;
#if defined(__linux__)
  if (mapped_bytes_) {
    munmap(data_, mapped_bytes_);
    data_ = nullptr;
    return;
  }
#endif
  ::operator delete[](data_, std::align_val_t(64));
  data_ = nullptr;
}

std::string transparent_huge_pages_mode() {
  std::FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  if (!f) return "unknown";
  char line[128] = {};
  const bool ok = std::fgets(line, sizeof line, f) != nullptr;
  std::fclose(f);
  const std::string s = ok ? line : "";
  const size_t open = s.find('['), close = s.find(']');
  return open != std::string::npos && close > open ? s.substr(open + 1, close - open - 1) : "unknown";
}

std::string weight_pages_report(bool requested, bool* huge) {
  const std::string mode = transparent_huge_pages_mode();
  const bool on = requested && mode != "never";
  if (huge) *huge = on;
  const std::string where = on          ? "huge pages ("
                            : requested ? "4 KiB pages ("
                                        : "the checkpoint's pages (--no-huge-pages; ";
  return where + "transparent huge pages '" + mode + "')";
}

int64_t available_memory_bytes() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return -1;
  char line[256];
  long long kib = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "MemAvailable: %lld kB", &kib) == 1) break;
  std::fclose(f);
  return kib < 0 ? -1 : int64_t(kib) * 1024;
}

}  // namespace tf
