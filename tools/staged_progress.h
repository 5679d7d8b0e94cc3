// One progress bar per stage of a long conversion (quantize, prune): the stage is the first
// word of the `what` the work reports ("calibration forward", "sensitivity layer 3 o"); a new
// stage finishes the previous bar and starts its own.
#pragma once

#include <memory>
#include <string>

#include "core/progress.h"

namespace tf::cli {

class StagedProgress {
 public:
  void update(const std::string& what, int64_t done, int64_t total) {
    const std::string s = what.substr(0, what.find(' '));
    if (s != stage_ || !bar_) {
      finish();
      bar_ = std::make_unique<ProgressBar>(s, total);
      stage_ = s;
    }
    bar_->update(done, what);
  }
  void finish() {
    if (bar_) bar_->finish();
    bar_.reset();
  }

 private:
  std::unique_ptr<ProgressBar> bar_;
  std::string stage_;
};

}  // namespace tf::cli
