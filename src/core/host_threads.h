// How many threads host compute (the CPU backend's ops) may use, per calling thread.
//
// The count is a process default (`-t N` on a verb; see default_host_threads()) that a
// thread may override for itself: tensor-parallel rank threads and data-parallel engine
// threads each take a share of the cores, so N ranks do not oversubscribe them. OpenMP
// regions that remain outside the CPU backend's hot paths follow the same count.
#pragma once

namespace tf {

// What `-t 0` means: the physical cores this process may run on (SMT siblings counted once;
// the affinity mask and a cgroup CPU quota respected), at most kMaxDefaultHostThreads.
//  - Physical, not logical: two hyper-threads share one core's FMA units and cache, so a
//    second thread per core adds contention to the GEMMs and nothing to the GEMVs.
//  - Capped: decode reads memory, which a handful of cores saturate; past that, threads
//    only add fork/join latency to the small ops of a decode step, and on a shared machine
//    every extra thread is one more that can be descheduled in the middle of an op.
// Computed once per process (reads /sys and /proc).
int default_host_threads();
inline constexpr int kMaxDefaultHostThreads = 16;

// The most either setter takes: far past the cores of any machine this runs on. A count such
// as 100,000 made thread creation fail inside the OpenMP runtime, which aborts the process.
inline constexpr int kMaxHostThreads = 1024;

// Sets the process default (n > 0); n <= 0 restores default_host_threads(). Raises an error
// naming n past kMaxHostThreads.
void set_default_host_threads(int n);
// Sets the calling thread's count (n > 0), or clears its override (n <= 0); the same limit.
void set_host_threads(int n);
// The calling thread's count: its override, else the process default. At least 1.
int host_threads();
// Threads each of `n_ways` threads may use when they share the calling thread's count.
int host_thread_share(int n_ways);

}  // namespace tf
