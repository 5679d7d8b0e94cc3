// A `twofold serve` child process for tests that run the binary as an operator does.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <regex>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_util.h"

namespace tf::test {

// `twofold serve -m MODEL --port 0 -t 1 EXTRA...` started with fork/exec; stdout is read until
// the startup banner's last line ("KV cache:"), the port taken from its "listening on" line.
class ServeProcess {
 public:
  explicit ServeProcess(const std::vector<std::string>& extra, const std::string& model = model_dir("tiny-main")) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(fds[1], STDOUT_FILENO);
      ::close(fds[0]);
      ::close(fds[1]);
      std::vector<std::string> args = {std::string(TF_BINARY_DIR) + "/tools/twofold", "serve", "-m", model,
                                       "--port", "0", "-t", "1"};
      args.insert(args.end(), extra.begin(), extra.end());
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    out_ = ::fdopen(fds[0], "r");
    char line[4096];
    const std::regex re("listening on http://[^:]+:([0-9]+)");
    // The startup banner: the address line, then the model line, then the KV cache line.
    while (std::fgets(line, sizeof line, out_)) {
      banner_ += line;
      std::cmatch m;
      if (std::regex_search(line, m, re)) port_ = std::stoi(m[1]);
      if (std::string(line).find("KV cache:") != std::string::npos) break;
    }
  }
  ~ServeProcess() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (out_) std::fclose(out_);
  }
  int port() const { return port_; }
  const std::string& banner() const { return banner_; }
  void signal(int sig) { ::kill(pid_, sig); }
  // The exit status, or -1 if it died of a signal.
  int wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    reaped_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
  int port_ = 0;
  bool reaped_ = false;
  std::string banner_;
};

}  // namespace tf::test
