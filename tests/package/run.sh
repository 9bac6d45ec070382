#!/usr/bin/env bash
# Installs strata to a temporary prefix, then configures, builds and runs (2 processes)
# a consumer project that finds it with find_package(strata CONFIG REQUIRED).
# usage: run.sh SOURCE_DIR WORK_DIR CMAKE MPIEXEC
set -euo pipefail
src=$1 work=$2 cmake=$3 mpiexec=$4
rm -rf "$work" && mkdir -p "$work"
# Installing needs no CUDA, and tests/examples are not part of the package.
"$cmake" -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DSTRATA_ENABLE_CUDA=OFF \
  -DSTRATA_ENABLE_TESTS=OFF -DSTRATA_ENABLE_EXAMPLES=OFF -DSTRATA_ENABLE_BENCH=OFF >"$work/install.log"
"$cmake" --install "$work/build" --prefix "$work/prefix" >>"$work/install.log"
"$cmake" -S "$src/tests/package/consumer" -B "$work/consumer" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix"
"$cmake" --build "$work/consumer"
"$mpiexec" -n 2 "$work/consumer/consumer"
