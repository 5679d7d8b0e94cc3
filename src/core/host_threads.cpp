// Host thread counts; see host_threads.h.
#include "core/host_threads.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "core/error.h"

namespace tf {
namespace {

// -1 when the file is missing or does not start with an integer.
long read_long(const std::string& path) {
  std::ifstream f(path);
  long v = -1;
  if (!(f >> v)) return -1;
  return v;
}

// Distinct (package, core) pairs among the CPUs of the affinity mask; 0 when unknown.
int physical_cores_in_mask() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 0;
  std::set<std::pair<long, long>> cores;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    const long pkg = read_long(dir + "physical_package_id"), core = read_long(dir + "core_id");
    // Without topology files (some containers) count each CPU as a core.
    cores.insert(core < 0 ? std::pair<long, long>{-1, cpu} : std::pair<long, long>{pkg, core});
  }
  return int(cores.size());
}

// CPUs' worth of time a cgroup CPU quota allows (rounded up), 0 when there is none.
int cgroup_cpu_quota() {
  std::ifstream v2("/sys/fs/cgroup/cpu.max");  // cgroup v2: "max 100000" or "200000 100000"
  std::string quota;
  long period = 0;
  if (v2 >> quota >> period) {
    if (quota == "max" || period <= 0) return 0;
    return int(std::ceil(std::stod(quota) / double(period)));
  }
  const long q = read_long("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), p = read_long("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
  return q > 0 && p > 0 ? int((q + p - 1) / p) : 0;
}

int compute_default() {
  int n = physical_cores_in_mask();
  if (n <= 0) n = int(std::max(1u, std::thread::hardware_concurrency()));
  if (const int quota = cgroup_cpu_quota(); quota > 0) n = std::min(n, quota);
  return std::clamp(n, 1, kMaxDefaultHostThreads);
}

void check_count(int n) {
  if (n > kMaxHostThreads) fail("{} host threads asked for; at most {} are allowed", n, kMaxHostThreads);
}

std::atomic<int> g_default{0};  // 0: not set, use default_host_threads()
thread_local int t_override = 0;

}  // namespace

int default_host_threads() {
  static const int n = compute_default();
  return n;
}

void set_default_host_threads(int n) {
  check_count(n);
  g_default.store(n > 0 ? n : 0);
  omp_set_num_threads(host_threads());
}

void set_host_threads(int n) {
  check_count(n);
  t_override = n > 0 ? n : 0;
  omp_set_num_threads(host_threads());
}

int host_threads() {
  if (t_override > 0) return t_override;
  const int d = g_default.load();
  return d > 0 ? d : default_host_threads();
}

int host_thread_share(int n_ways) { return std::max(1, host_threads() / std::max(1, n_ways)); }

}  // namespace tf
