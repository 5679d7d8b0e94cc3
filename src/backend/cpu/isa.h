// Which instruction-set level the CPU backend's kernels run at, chosen once at run time.
//
// The kernel sources (src/backend/cpu/kernels/) are compiled once per level with that
// level's compiler flags, each copy in its own namespace (tf::cpu::baseline, ::avx2, ...),
// and one portable binary picks the best level the CPU supports. TF_CPU_ISA=<name> forces
// a lower level (tests run every kernel at every level the machine has); naming a level
// the CPU or the build lacks is an error. A TF_NATIVE build has one level, "native"
// (-march=native), and accepts only TF_CPU_ISA=native.
//
// Levels (each a superset of the one before):
//   baseline     the compiler's default for the target (x86-64: SSE2; 4 float lanes)
//   avx2         x86-64-v3: AVX2, FMA, F16C, BMI2 (8 lanes; int8 dots with vpmaddubsw)
//   avx512       x86-64-v4: AVX-512 F/BW/DQ/VL/CD (16 lanes; int8 dots with vpmaddubsw)
//   avx512_vnni  avx512 + AVX512-VNNI (int8 dots with vpdpbusd)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tf::cpu {

enum class Isa : uint8_t { Baseline, Avx2, Avx512, Avx512Vnni, Native };

std::string_view isa_name(Isa isa);
// The levels this build has kernels for and this CPU can run, lowest first.
const std::vector<Isa>& supported_isas();
// The level in use: TF_CPU_ISA when set (checked against supported_isas(), throws
// tf::Error naming the variable otherwise), else the highest supported.
Isa active_isa();
// Switches the level for the rest of the process (tests); must be in supported_isas().
void set_active_isa(Isa isa);
// One line for `twofold info` / `bench`: the level in use, how it was chosen, and the
// CPU's relevant features, e.g. "avx512_vnni (best of baseline, avx2, avx512, avx512_vnni;
// CPU: avx2 fma f16c avx512f/bw/dq/vl avx512_vnni avx512_bf16)".
std::string isa_report();
// Whether this process may use AMX tiles: the CPU has AMX-BF16 and AVX512-BF16, the OS saves
// the tile state, and Linux granted it (arch_prctl ARCH_REQ_XCOMP_PERM, asked once).
bool amx_tiles_permitted();

}  // namespace tf::cpu
