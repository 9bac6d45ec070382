#!/usr/bin/env bash
# Installs strata to a temporary prefix, then configures, builds and runs (2 processes)
# a consumer project that finds it with find_package(strata CONFIG REQUIRED); then the
# same install moved to another prefix (relocated), and strata taken by add_subdirectory
# and by FetchContent from the source tree (tests/package/subproject), and the vcpkg
# overlay port staged by packaging/vcpkg/stage.cmake (with its cuda feature where nvcc is,
# its mlflow feature where libcurl is).
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

# The other ways in, each a fresh project (CUDA off: what is checked is the CMake, and
# enabling CUDA in a consumer costs it nvcc's configure checks).
sub() {
  local name=$1
  shift
  "$cmake" -S "$src/tests/package/subproject" -B "$work/$name" -DCMAKE_BUILD_TYPE=Release "$@" >"$work/$name.log"
  "$cmake" --build "$work/$name" >>"$work/$name.log"
  "$mpiexec" -n 2 "$work/$name/subproject"
}
# Relocated: the package refers to nothing of its original prefix.
mv "$work/prefix" "$work/moved-prefix"
sub relocated -DSTRATA_CONSUME=find_package -DCMAKE_PREFIX_PATH="$work/moved-prefix"
sub subdirectory -DSTRATA_CONSUME=subdirectory -DSTRATA_SOURCE="$src" -DSTRATA_ENABLE_CUDA=OFF
sub fetchcontent -DSTRATA_CONSUME=fetchcontent -DSTRATA_SOURCE="$src" -DSTRATA_ENABLE_CUDA=OFF
features=mpi mlflow=OFF
if command -v nvcc >/dev/null; then features="$features;cuda"; fi
if command -v curl-config >/dev/null; then features="$features;mlflow" mlflow=ON; fi
"$cmake" -DSTAGE="$work/vcpkg" -DFEATURES="$features" -P "$src/packaging/vcpkg/stage.cmake"
sub vcpkg -DSTRATA_CONSUME=find_package -DCMAKE_PREFIX_PATH="$work/vcpkg/installed/x64-linux" \
  -DSTRATA_EXPECT_MLFLOW=$mlflow
echo "package: find_package, relocated, add_subdirectory, FetchContent and vcpkg-port consumers ran"
