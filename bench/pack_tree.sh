#!/bin/sh
# Packs the committed tree (HEAD) without the bundled models and test data into
# build-cuda-sysroot/tree.tar, so a device call builds exactly what is committed even while
# the working tree holds someone's unfinished edits. On the device:
#   mkdir -p /tmp/t && tar -C /tmp/t -xf build-cuda-sysroot/tree.tar &&
#   ln -s "$PWD/models" /tmp/t/models && ln -s "$PWD/tests/data" /tmp/t/tests/data &&
#   cp -r build-cuda-sysroot /tmp/t/ && cd /tmp/t && bash bench/device_run.sh
set -eu
cd "$(dirname "$0")/.."
git archive --format=tar HEAD -- . ':(exclude)models' ':(exclude)tests/data' > build-cuda-sysroot/tree.tar
ls -l build-cuda-sysroot/tree.tar
