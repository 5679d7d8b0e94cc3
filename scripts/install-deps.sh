#!/usr/bin/env bash
# Installs what twofold needs to build and test on Debian 12 (apt-get; run as root or with sudo).
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
PKGS=(build-essential cmake ninja-build pkg-config xz-utils
      nlohmann-json3-dev libcli11-dev libfmt-dev libpcre2-dev libicu-dev
      libgtest-dev libgmock-dev libcpp-httplib-dev libxxhash-dev python3
      # The sanitizer and fuzzing builds (scripts/test_sanitizers.sh, test_tsan.sh, fuzz.sh):
      # clang with its sanitizer and libFuzzer runtimes, and its OpenMP (libomp, with Archer
      # for ThreadSanitizer).
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

# The server's tests drive it with the official `openai` Python client (tests/serve).
if ! python3 -c "import openai" 2>/dev/null; then
  if ! python3 -m pip --version >/dev/null 2>&1; then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-pip
  fi
  # Debian 12's system Python refuses pip installs without --break-system-packages (PEP 668).
  python3 -m pip install -q openai 2>/dev/null || python3 -m pip install -q --break-system-packages openai
fi
