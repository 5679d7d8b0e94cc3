// Run-time choice of the kernels' ISA level; see isa.h.
//
// Why per-level compilation of our own sources rather than Highway's dynamic dispatch: the
// kernels that matter here are the INT8/INT4 dot products (vpdpbusd, vpmaddubsw), and
// Debian 12's Highway (1.0.3) has no operation for them (SumOfMulQuadAccumulate came in
// a later release) nor an SSE2 target (its x86-64 baseline is scalar emulation), so those
// kernels would be raw intrinsics inside Highway's target blocks in any case. Compiling
// the kernel folder once per level with that level's flags (as PyTorch's CPU_CAPABILITY
// kernels and ggml's CPU variants do) gives the float kernels, written with GCC vector
// extensions, their full register width at every level with one dispatch mechanism and
// no dependency.
#include "backend/cpu/isa.h"

#include <atomic>
#include <cstdlib>
#include <string>

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "backend/cpu/kernels/kernels.h"
#include "core/error.h"

namespace tf::cpu {

#if defined(TF_CPU_NATIVE)
namespace native { const KernelTable& table(); }
#else
namespace baseline { const KernelTable& table(); }
#if defined(TF_CPU_X86_LEVELS)
namespace avx2 { const KernelTable& table(); }
namespace avx512 { const KernelTable& table(); }
namespace avx512_vnni { const KernelTable& table(); }
#endif
#endif

namespace {

#if defined(__x86_64__)
// CPUID leaf `leaf`, register ECX, bit `bit`. For the features clang before 16 does not name in
// __builtin_cpu_supports (f16c, movbe, lzcnt; gcc names them all, and the level names
// "x86-64-v3"/"v4" too), so that the levels are the same under both compilers.
bool cpuid_ecx_bit(unsigned leaf, unsigned bit) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(leaf, &a, &b, &c, &d) && (c >> bit & 1u);
}
bool has_f16c() { return cpuid_ecx_bit(1, 29); }

// AMX-TILE and AMX-BF16 (CPUID 7.0 EDX bits 24 and 22), AVX512-BF16 (7.1 EAX bit 5), and the
// OS saving the tile state (XCR0 bits 17 and 18).
bool has_amx_bf16() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d >> 24 & 1u) || !(d >> 22 & 1u)) return false;
  if (!__get_cpuid_count(7, 1, &a, &b, &c, &d) || !(a >> 5 & 1u)) return false;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c >> 27 & 1u)) return false;  // OSXSAVE
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo >> 17 & 3u) == 3u;
}

// The x86-64-v3 and v4 micro-architecture levels (as -march=x86-64-v3/v4 assume them),
// feature by feature; __builtin_cpu_supports checks that the OS saves the AVX and AVX-512
// registers.
bool has_x86_64_v3() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi") &&
         __builtin_cpu_supports("bmi2") && has_f16c() && cpuid_ecx_bit(1, 22) /* movbe */ &&
         cpuid_ecx_bit(0x80000001, 5) /* lzcnt */;
}
bool has_x86_64_v4() {
  return has_x86_64_v3() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vl");
}
#endif

#if defined(TF_CPU_X86_LEVELS)
bool cpu_has(Isa isa) {
  __builtin_cpu_init();
  switch (isa) {
    case Isa::Baseline: return true;
    case Isa::Avx2: return has_x86_64_v3();
    case Isa::Avx512: return has_x86_64_v4();
    case Isa::Avx512Vnni: return has_x86_64_v4() && __builtin_cpu_supports("avx512vnni");
    case Isa::Native: return false;
  }
  return false;
}
#endif

std::vector<Isa> detect_supported() {
#if defined(TF_CPU_NATIVE)
  return {Isa::Native};
#elif defined(TF_CPU_X86_LEVELS)
  std::vector<Isa> v;
  for (Isa isa : {Isa::Baseline, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni})
    if (cpu_has(isa)) v.push_back(isa);
  return v;
#else
  return {Isa::Baseline};
#endif
}

Isa choose_initial() {
  const std::vector<Isa>& ok = supported_isas();
  const char* env = std::getenv("TF_CPU_ISA");
  if (!env || !*env) return ok.back();
  std::string names;
  for (Isa isa : ok) {
    if (isa_name(isa) == env) return isa;
    if (!names.empty()) names += ", ";
    names += isa_name(isa);
  }
  fail("TF_CPU_ISA={}: not a level this build and CPU support (supported: {})", env, names);
}

// Set on first use; -1 = not chosen yet.
std::atomic<int> g_active{-1};
std::atomic<bool> g_set_by_caller{false};

}  // namespace

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::Baseline: return "baseline";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    case Isa::Avx512Vnni: return "avx512_vnni";
    case Isa::Native: return "native";
  }
  return "?";
}

const std::vector<Isa>& supported_isas() {
  static const std::vector<Isa> v = detect_supported();
  return v;
}

Isa active_isa() {
  int a = g_active.load(std::memory_order_acquire);
  if (a < 0) {
    int expected = -1;
    g_active.compare_exchange_strong(expected, int(choose_initial()));
    a = g_active.load(std::memory_order_acquire);
  }
  return Isa(a);
}

void set_active_isa(Isa isa) {
  for (Isa ok : supported_isas()) {
    if (ok == isa) {
      g_active.store(int(isa), std::memory_order_release);
      g_set_by_caller.store(true);
      return;
    }
  }
  fail("CPU ISA level {} is not supported by this build and CPU", isa_name(isa));
}

std::string isa_report() {
  const Isa active = active_isa();
  std::string s(isa_name(active));
  const char* env = std::getenv("TF_CPU_ISA");
  s += g_set_by_caller.load() ? " (set by the caller; supported:"
       : env && *env          ? " (forced by TF_CPU_ISA; supported:"
                              : " (best of";
  for (Isa isa : supported_isas()) {
    s += ' ';
    s += isa_name(isa);
  }
  s += ")";
  // The prefill path of quantized weights with 16-bit activations (kernels.h).
  const KernelTable& kt = kernels_for(active);
  s += kt.prefill_dequant_8bit && kt.prefill_dequant_4bit
           ? "; quantized prefill (16-bit activations): F32 GEMM on dequantized weights"
       : kt.prefill_dequant_8bit
           ? "; quantized prefill (16-bit activations): F32 GEMM on dequantized 8-bit, Q5_K and Q6_K weights, integer GEMM on 4-bit"
           : "; quantized prefill (16-bit activations): integer GEMM, F32 GEMM on dequantized Q5_K and Q6_K";
#if defined(__x86_64__)
  __builtin_cpu_init();
  std::string cpu;
  const auto add = [&](const char* name, bool has) {
    if (!has) return;
    if (!cpu.empty()) cpu += ' ';
    cpu += name;
  };
  add("avx2", __builtin_cpu_supports("avx2"));
  add("fma", __builtin_cpu_supports("fma"));
  add("f16c", has_f16c());
  add("avx512f/bw/dq/vl", has_x86_64_v4());
  add("avx512_vnni", __builtin_cpu_supports("avx512vnni"));
  add("avx512_bf16", __builtin_cpu_supports("avx512bf16"));
  add("amx_bf16", has_amx_bf16());
  s += "; CPU: " + (cpu.empty() ? std::string("sse2") : cpu);
#endif
  return s;
}

const KernelTable& kernels_for(Isa isa) {
  switch (isa) {
#if defined(TF_CPU_NATIVE)
    case Isa::Native: return native::table();
#else
    case Isa::Baseline: return baseline::table();
#if defined(TF_CPU_X86_LEVELS)
    case Isa::Avx2: return avx2::table();
    case Isa::Avx512: return avx512::table();
    case Isa::Avx512Vnni: return avx512_vnni::table();
#endif
#endif
    default: break;
  }
  fail("CPU ISA level {} has no kernels in this build", isa_name(isa));
}

const KernelTable& kernels() { return kernels_for(active_isa()); }

bool amx_tiles_permitted() {
#if defined(__x86_64__) && defined(__linux__)
  static const bool ok = [] {
    if (!has_amx_bf16()) return false;
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;  // asm/prctl.h, the tile data state
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return ok;
#else
  return false;
#endif
}

}  // namespace tf::cpu
