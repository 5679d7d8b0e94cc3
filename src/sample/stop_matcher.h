// Stop strings over a stream of detokenised text.
//
// The engine pushes each new text piece; push returns what may be shown now. Text that could
// still turn out to be the start of a stop string is held back until the next piece decides
// it. Once a stop string appears, the text before it is returned and everything from the stop
// string on is dropped (OpenAI's `stop`: the stop string is not part of the output).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tf {

class StopMatcher {
 public:
  // Empty strings in `stops` are ignored; with no stop strings every push passes through.
  explicit StopMatcher(std::vector<std::string> stops);

  // Appends piece and returns the text that is safe to emit now. After stopped(), returns "".
  std::string push(std::string_view piece);

  // At the end of generation without a stop: the held-back text. "" after stopped().
  std::string flush();

  bool stopped() const { return stopped_; }

  // The stop string that ended the text ("" while not stopped), e.g. for vLLM's stop_reason.
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;  // non-empty only
  std::string held_;                // a suffix of the text that is a proper prefix of a stop
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace tf
