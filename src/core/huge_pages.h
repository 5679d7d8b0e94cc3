// Host memory for large, long-lived buffers that are streamed whole (weights), backed by
// transparent huge pages where the kernel offers them.
//
// A decode step reads every weight once, so on 4 KiB pages it takes a TLB miss every 4 KiB
// (on a virtual machine each one a two-level page walk). On 2 MiB pages the same stream
// takes 512x fewer: on a 2-core VM a read-only pass rose from 23 to 28-35 GB/s and 8- and
// 4-bit decode of a 1B shape by a quarter (docs/PERF.md, "Weights on huge pages"). Linux
// gives anonymous memory huge pages only where asked (transparent_hugepage "madvise",
// Debian's default), so these buffers are mapped on their own, 2 MiB aligned, and advised
// MADV_HUGEPAGE. Smaller buffers, other systems, or a kernel with THP off get ordinary
// aligned memory; the contents behave the same either way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tf {

class HugePageBuffer {
 public:
  static constexpr size_t kHugePage = size_t(2) << 20;

  HugePageBuffer() = default;
  // `bytes` of uninitialized memory, 64-byte aligned (2 MiB aligned when mapped for huge
  // pages, which buffers of at least kHugePage are). Throws std::bad_alloc when out of memory.
  explicit HugePageBuffer(size_t bytes);
  ~HugePageBuffer();
  HugePageBuffer(HugePageBuffer&& o) noexcept;
  HugePageBuffer& operator=(HugePageBuffer&& o) noexcept;
  HugePageBuffer(const HugePageBuffer&) = delete;
  HugePageBuffer& operator=(const HugePageBuffer&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // Whether the buffer was mapped and advised for huge pages (whether the kernel backs it
  // with them is the kernel's choice: /proc/self/smaps AnonHugePages says).
  bool advised() const { return mapped_bytes_ != 0; }

 private:
  void free();
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_bytes_ = 0;  // nonzero: mmap'ed (munmap on free); zero: operator new
};

// The kernel's transparent huge page mode for anonymous memory: "always", "madvise" (either
// gives these buffers huge pages), "never", or "unknown" where the setting cannot be read.
std::string transparent_huge_pages_mode();

// Where the CPU backend keeps the weights a decode step streams, for `info` and `bench`, given
// whether it is asked to copy them onto huge pages (BackendOptions::huge_pages) and the mode:
// "huge pages (transparent huge pages 'madvise')", "the checkpoint's pages (--no-huge-pages;
// ...)" or "4 KiB pages (transparent huge pages 'never')". *huge: whether that is huge pages.
std::string weight_pages_report(bool requested, bool* huge = nullptr);

// MemAvailable of /proc/meminfo in bytes (what the kernel can hand out without swapping,
// reclaimable page cache included), or -1 where that is not known.
int64_t available_memory_bytes();

}  // namespace tf
