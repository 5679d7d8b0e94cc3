// The CPU backend's prefill GEMM beside OpenBLAS and oneDNN on the matrices of a Llama 1B
// shape (hidden 2048, ffn 8192: q|k|v 3072 x 2048, o 2048 x 2048, gate|up 16384 x 2048, down
// 2048 x 8192), out[n, m] = x[n, k] @ w[m, k]^T, for a few token counts:
//
//   twofold bf16        CpuBackend::matmul, BF16 weights, F32 activations (the default path)
//   twofold bf16-acts   the same with bf16_activations (AMX tiles where the CPU has them)
//   twofold f32         F32 weights
//   openblas sgemm      F32 weights (twice the bytes of BF16; Debian 12's OpenBLAS is built
//                       without its BF16 GEMM, cblas_sbgemm)
//   onednn f32 / bf16   a matmul primitive on F32, or on BF16 weights and activations
//
// GFLOP/s (2 n m k per product), best of --reps after one warm-up; the largest relative
// difference of each result from twofold bf16's is printed beside it as a sanity check (the
// BF16-activation rows differ by the rounding of x). Not a test: it asserts nothing. Built only
// where libopenblas-dev and libdnnl-dev are installed (they are not twofold's dependencies).
//
// usage: bench_cpu_gemm [-n 64,512] [-t THREADS] [--reps N]
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <oneapi/dnnl/dnnl.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/isa.h"
#include "core/host_threads.h"
#include "core/split.h"

namespace tf {
namespace {

struct Matrix {
  const char* name;
  int64_t m, k;
};
constexpr Matrix kMatrices[] = {{"qkv", 3072, 2048}, {"o", 2048, 2048}, {"gate_up", 16384, 2048}, {"down", 2048, 8192}};

double best_seconds(int reps, const std::function<void()>& fn) {
  // The libraries' idle threads spin for a while after a call (OpenBLAS's for about 0.1 s) and
  // took half the cores from the next engine measured: let them go to sleep first.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  fn();  // warm-up: first touch of outputs, the libraries' packing buffers, thread start
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

double max_rel_diff(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num = std::max(num, double(std::fabs(got[i] - want[i])));
    den = std::max(den, double(std::fabs(want[i])));
  }
  return den > 0 ? num / den : num;
}

// oneDNN matmul out[n, m] = x[n, k] @ w^T, with w given as [m, k] row-major (format "ba" of a
// [k, m] weight), in `dt` for x and w, F32 out. The primitive picks its weight layout ("any") and
// the weights are reordered into it once, outside the timing, as an inference engine would.
struct OneDnnMatmul {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  dnnl::matmul prim;
  dnnl::memory xm, wm, om;
  OneDnnMatmul(int64_t n, int64_t k, int64_t m, dnnl::memory::data_type dt, void* x, void* w, float* out) {
    using tag = dnnl::memory::format_tag;
    const dnnl::memory::desc xd({n, k}, dt, tag::ab), wd_any({k, m}, dt, tag::any), wd_plain({k, m}, dt, tag::ba),
        od({n, m}, dnnl::memory::data_type::f32, tag::ab);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(xd, wd_any, od), eng);  // oneDNN 2.x API
    prim = dnnl::matmul(pd);
    xm = dnnl::memory(xd, eng, x);
    om = dnnl::memory(od, eng, out);
    dnnl::memory plain(wd_plain, eng, w);
    wm = dnnl::memory(pd.weights_desc(), eng);
    dnnl::reorder(plain, wm).execute(strm, plain, wm);
    strm.wait();
  }
  void run() {
    prim.execute(strm, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, om}});
    strm.wait();
  }
};

}  // namespace
}  // namespace tf

int main(int argc, char** argv) {
  using namespace tf;
  std::vector<int64_t> tokens = {64, 512};
  int threads = 2, reps = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-n" && i + 1 < argc) {
      tokens.clear();
      for (const std::string& t : split_list(argv[++i])) tokens.push_back(std::stoll(t));
    }
    else if (a == "-t" && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [-n 64,512] [-t THREADS] [--reps N]\n", argv[0]);
      return a == "-h" || a == "--help" ? 0 : 2;
    }
  }
  set_host_threads(threads);
  openblas_set_num_threads(threads);
  omp_set_num_threads(threads);
  std::printf("%d threads; twofold kernels %s; OpenBLAS %s; oneDNN %d.%d.%d\n", threads, cpu::isa_report().c_str(),
              openblas_get_config(), dnnl_version()->major, dnnl_version()->minor, dnnl_version()->patch);
  std::printf("%-8s %5s  %-17s %9s %9s\n", "matrix", "n", "engine", "GFLOP/s", "max diff");
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  CpuBackend plain(BackendOptions{}), amx(BackendOptions{.bf16_activations = true});
  for (const Matrix& mat : kMatrices) {
    const int64_t m = mat.m, k = mat.k;
    std::vector<uint16_t> wb(size_t(m * k));
    std::vector<float> wf(size_t(m * k));
    for (size_t i = 0; i < wb.size(); ++i) {
      wb[i] = f32_to_bf16(nd(rng) / std::sqrt(float(k)));
      wf[i] = bf16_to_f32(wb[i]);
    }
    const TensorView wbv = plain.upload(make_view(wb.data(), DType::BF16, {m, k}), DType::BF16);
    const TensorView wba = amx.upload(make_view(wb.data(), DType::BF16, {m, k}), DType::BF16);
    const TensorView wfv = plain.upload(make_view(wf.data(), DType::F32, {m, k}), DType::F32);
    for (const int64_t n : tokens) {
      std::vector<float> x(size_t(n * k)), ref(size_t(n * m)), out(size_t(n * m));
      std::vector<uint16_t> xb(x.size());  // x rounded to BF16, for oneDNN's BF16 matmul
      for (size_t i = 0; i < x.size(); ++i) {
        x[i] = nd(rng);
        xb[i] = f32_to_bf16(x[i]);
      }
      const TensorView xv = make_view(x.data(), DType::F32, {n, k});
      const double flop = 2.0 * double(n) * double(m) * double(k);
      const auto report = [&](const char* engine, double s, const std::vector<float>& got) {
        std::printf("%-8s %5lld  %-17s %9.1f %9.2g\n", mat.name, (long long)n, engine, flop / s / 1e9,
                    max_rel_diff(got, ref));
      };
      const double s_bf16 =
          best_seconds(reps, [&] { plain.matmul(xv, wbv, {}, make_view(ref.data(), DType::F32, {n, m})); });
      report("twofold bf16", s_bf16, ref);
      report("twofold bf16-acts",
             best_seconds(reps, [&] { amx.matmul(xv, wba, {}, make_view(out.data(), DType::F32, {n, m})); }), out);
      report("twofold f32",
             best_seconds(reps, [&] { plain.matmul(xv, wfv, {}, make_view(out.data(), DType::F32, {n, m})); }), out);
      {
        OneDnnMatmul f32(n, k, m, dnnl::memory::data_type::f32, x.data(), wf.data(), out.data());
        report("onednn f32", best_seconds(reps, [&] { f32.run(); }), out);
        OneDnnMatmul bf16(n, k, m, dnnl::memory::data_type::bf16, xb.data(), wb.data(), out.data());
        report("onednn bf16", best_seconds(reps, [&] { bf16.run(); }), out);
      }
      report("openblas sgemm", best_seconds(reps, [&] {
               cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blasint(n), blasint(m), blasint(k), 1.0f, x.data(),
                           blasint(k), wf.data(), blasint(k), 0.0f, out.data(), blasint(m));
             }), out);
    }
    plain.release(wbv);
    plain.release(wfv);
    amx.release(wba);
  }
  return 0;
}
