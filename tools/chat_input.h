// What `twofold chat` reads: user messages from standard input (a terminal or a pipe), and
// Ctrl-C (SIGINT) as an event instead of the end of the process.
//
// Message rules (the same for a terminal and a pipe):
//   - one line is one message;
//   - a line ending in a backslash continues on the next line (the backslash becomes a
//     newline);
//   - a line starting with """ opens a block that runs up to and including the next line
//     ending in """ (the quotes themselves are dropped), for pasting text with blank lines.
#pragma once

#include <cstdint>
#include <string>

namespace tf::cli {

// Installs a SIGINT handler that only counts presses (no SA_RESTART needed: input is polled).
void catch_interrupts();
// Presses of Ctrl-C so far.
int64_t n_interrupts();

// Lines of standard input. Reading polls with a short timeout, so that a Ctrl-C is noticed
// even though the signal may land on any thread (OpenMP workers included) and so never
// interrupt a blocking read.
class LineInput {
 public:
  enum class Status { Line, Eof, Interrupted };
  // The next line without its "\n" (and without a "\r" before it); Interrupted when Ctrl-C was
  // pressed since the last call that returned Interrupted; at the end, a last unterminated line
  // and then Eof.
  Status next(std::string& line);
  // Counts the presses so far as handled (e.g. the one that stopped an answer).
  void forget_interrupts();

 private:
  std::string buf_;
  bool eof_ = false;
  int64_t interrupts_seen_ = 0;
};

// Reads one message by the rules above. `prompt` and `more` are printed before the first line
// and before each continuation line (empty for a pipe). Interrupted drops a half-typed block.
LineInput::Status read_message(LineInput& in, const std::string& prompt, const std::string& more,
                               std::string& message);

}  // namespace tf::cli
