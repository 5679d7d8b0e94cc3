// HugePageBuffer: sizes below and above a huge page, alignment, every byte writable and kept,
// moves, and (where the kernel offers transparent huge pages) that Linux counts a large
// buffer's mapping as eligible for them.
#include "core/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

namespace tf {
namespace {

void fill_and_check(const HugePageBuffer& b) {
  for (size_t i = 0; i < b.size(); ++i) b.data()[i] = uint8_t(i * 131 + 7);
  size_t wrong = 0;
  for (size_t i = 0; i < b.size(); ++i) wrong += b.data()[i] != uint8_t(i * 131 + 7);
  EXPECT_EQ(wrong, 0u);
}

// "THPeligible" of the /proc/self/smaps entry holding p: 1 or 0, or -1 when not reported.
int thp_eligible(const void* p) {
  std::ifstream f("/proc/self/smaps");
  const auto addr = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(f, line);) {
    unsigned long lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(':') > line.find(' ')) {
      inside = addr >= lo && addr < hi;
      continue;
    }
    if (inside && line.rfind("THPeligible:", 0) == 0) return std::stoi(line.substr(12));
  }
  return -1;
}

bool thp_enabled() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string s;
  std::getline(f, s);
  return !s.empty() && s.find("[never]") == std::string::npos;
}

TEST(HugePageBuffer, SmallBuffersAreOrdinaryAlignedMemory) {
  for (const size_t bytes : {size_t(0), size_t(1), size_t(4096), HugePageBuffer::kHugePage - 1}) {
    SCOPED_TRACE(bytes);
    HugePageBuffer b(bytes);
    ASSERT_NE(b.data(), nullptr);
    EXPECT_EQ(b.size(), bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
    EXPECT_FALSE(b.advised());
    fill_and_check(b);
  }
}

TEST(HugePageBuffer, LargeBuffersStartOnAHugePageAndHoldEveryByte) {
  for (const size_t bytes : {HugePageBuffer::kHugePage, 3 * HugePageBuffer::kHugePage + 12345}) {
    SCOPED_TRACE(bytes);
    HugePageBuffer b(bytes);
    ASSERT_NE(b.data(), nullptr);
    EXPECT_EQ(b.size(), bytes);
#if defined(__linux__)
    EXPECT_TRUE(b.advised());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % HugePageBuffer::kHugePage, 0u);
#endif
    fill_and_check(b);
#if defined(__linux__)
    const int eligible = thp_eligible(b.data());
    if (thp_enabled() && eligible >= 0) {
      EXPECT_EQ(eligible, 1) << "the mapping is not eligible for huge pages";
    }
#endif
  }
}

TEST(HugePageBuffer, MovesHandOverTheMemory) {
  HugePageBuffer a(HugePageBuffer::kHugePage + 1), small(100);
  uint8_t* p = a.data();
  p[0] = 42;
  HugePageBuffer b(std::move(a));
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.data()[0], 42);
  small = std::move(b);  // frees small's own memory, takes b's
  EXPECT_EQ(small.data(), p);
  EXPECT_EQ(small.size(), HugePageBuffer::kHugePage + 1);
  EXPECT_EQ(b.data(), nullptr);
  HugePageBuffer& same = small;  // HostBackend::release moves the last buffer onto itself
  small = std::move(same);
  EXPECT_EQ(small.data(), p);
}

TEST(HugePageBuffer, AvailableMemoryAndTheThpModeAreReportedOnLinux) {
#if defined(__linux__)
  EXPECT_GT(available_memory_bytes(), 0);
#else
  EXPECT_EQ(available_memory_bytes(), -1);
#endif
  const std::string mode = transparent_huge_pages_mode();
  EXPECT_TRUE(mode == "always" || mode == "madvise" || mode == "never" || mode == "unknown") << mode;
  if (std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled")) {
    EXPECT_NE(mode, "unknown");
  }
  EXPECT_EQ(thp_enabled(), mode == "always" || mode == "madvise");
}

TEST(HugePageBuffer, WeightPagesReportNamesThePagesAndTheMode) {
  const std::string mode = transparent_huge_pages_mode();
  bool huge = true;
  const std::string off = weight_pages_report(false, &huge);
  EXPECT_FALSE(huge);
  EXPECT_EQ(off, "the checkpoint's pages (--no-huge-pages; transparent huge pages '" + mode + "')");
  const std::string on = weight_pages_report(true, &huge);
  EXPECT_EQ(huge, mode != "never");
  EXPECT_EQ(on, std::string(huge ? "huge pages" : "4 KiB pages") + " (transparent huge pages '" + mode + "')");
}

}  // namespace
}  // namespace tf
