#include "sample/stop_matcher.h"

#include <algorithm>

namespace tf {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (std::string& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

// Works on bytes. Invariant between calls: held_ contains no whole stop string, and it is the
// longest suffix of the text so far that is a proper prefix of some stop string. Any stop
// string that starts in emitted text would have had its start held back, so a match can only
// start inside held_ + piece, and only end inside piece.
//
// Which match wins: the one that ends first (then the longest). A stream sees matches in the
// order they end, so this rule gives the same output however the text is cut into pieces.
//
// UTF-8: pieces are whole characters and a stop string starts with a lead byte, so both a
// match and a held-back suffix start on a character boundary and we never split a character.
// Cost: O(|text| * n_stops) for the searches, plus O(sum |stop|^2) per push for the suffix
// check, which is nothing for the short stop strings requests use.
std::string StopMatcher::push(std::string_view piece) {
  if (stopped_) return "";
  if (stops_.empty()) return std::string(piece);
  std::string text = std::move(held_);
  text.append(piece);
  held_.clear();

  // Phase 1: a whole stop string ends the text.
  size_t best_end = std::string::npos;
  size_t best_start = 0;
  const std::string* best = nullptr;
  for (const std::string& s : stops_) {
    const size_t pos = text.find(s);
    if (pos == std::string::npos) continue;
    const size_t end = pos + s.size();
    if (end < best_end || (end == best_end && pos < best_start)) {
      best_end = end;
      best_start = pos;
      best = &s;
    }
  }
  if (best != nullptr) {
    stopped_ = true;
    matched_ = *best;
    text.resize(best_start);
    return text;
  }

  // Phase 2: hold back the longest suffix that is a proper prefix of a stop string.
  size_t n_hold = 0;
  for (const std::string& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, text.size());
    for (size_t len = max_len; len > n_hold; --len) {
      if (std::string_view(text).substr(text.size() - len) == std::string_view(s).substr(0, len)) {
        n_hold = len;
        break;
      }
    }
  }
  held_.assign(text, text.size() - n_hold, n_hold);
  text.resize(text.size() - n_hold);
  return text;
}

std::string StopMatcher::flush() {
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace tf
