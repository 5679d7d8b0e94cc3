// Bounded admission of generation requests: at most `limit` in flight (running in the
// engine or waiting for it). A Slot is held for a request's whole life, streaming included,
// and given back by its destructor, so an early return or a dropped connection cannot leak
// one. The server's graceful shutdown waits here for the count to reach zero.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

namespace tf::serve {

class Admission {
 public:
  explicit Admission(int32_t limit) : limit_(limit) {}

  class Slot {
   public:
    explicit Slot(Admission& a) : a_(a) {}
    ~Slot() { a_.release(); }
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;

   private:
    Admission& a_;
  };

  // nullptr when `limit` requests are already in flight.
  std::shared_ptr<Slot> try_acquire() {
    std::lock_guard lock(mu_);
    if (n_ >= limit_) return nullptr;
    ++n_;
    return std::make_shared<Slot>(*this);
  }
  int32_t limit() const { return limit_; }
  int32_t in_flight() const {
    std::lock_guard lock(mu_);
    return n_;
  }
  // True if the count reached zero within `timeout`.
  template <typename Rep, typename Period>
  bool wait_idle(std::chrono::duration<Rep, Period> timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return n_ == 0; });
  }

 private:
  void release() {
    {
      std::lock_guard lock(mu_);
      --n_;
    }
    cv_.notify_all();
  }

  const int32_t limit_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int32_t n_ = 0;
};

}  // namespace tf::serve
