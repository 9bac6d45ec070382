#!/usr/bin/env bash
# `conan create` of packaging/conan with no remote: the requirements come from the
# system through packaging/conan/profiles/system ([platform_requires]), and the recipe's
# test_package (a consumer through CMakeDeps/CMakeToolchain) builds and runs on 2
# processes. Conan's home is a fresh one under WORK_DIR, so nothing of the user's is used.
# usage: conan.sh SOURCE_DIR WORK_DIR MPIEXEC   (conan: scripts/deps --conan)
set -euo pipefail
src=$1 work=$2 mpiexec=$3
conan=${STRATA_CONAN:-${STRATA_CONAN_ENV:-$HOME/.cache/strata/conan}/bin/conan}
if [ ! -x "$conan" ]; then
  echo "conan.sh: no conan at $conan (scripts/deps --conan installs it; STRATA_CONAN names another)" >&2
  exit 1
fi
rm -rf "$work" && mkdir -p "$work"
export CONAN_HOME=$work/home STRATA_MPIEXEC=$mpiexec
"$conan" profile detect >"$work/detect.log" 2>&1
"$conan" remote disable "*" >/dev/null  # offline: a requirement not in the profile fails here
# test_package is copied so that its build folder is not written into the source tree.
cp -r "$src/packaging/conan/test_package" "$work/test_package"
# With mlflow=True, so that test_package links strata::mlflow (libcurl) as well.
"$conan" create "$src/packaging/conan" -pr:a "$src/packaging/conan/profiles/system" -o "strata/*:mlflow=True" \
  -tf "$work/test_package" >"$work/create.log" 2>&1 || { tail -40 "$work/create.log"; exit 1; }
grep "strata .*: all_reduce and a training step\|strata::mlflow:" "$work/create.log"
[ "$(grep -c 'training step .* ok$' "$work/create.log")" = 2 ] || { echo "conan.sh: test_package did not pass on 2 ranks"; exit 1; }
grep -q 'strata::mlflow: an unreachable server leaves the run inactive' "$work/create.log" ||
  { echo "conan.sh: test_package did not use strata::mlflow"; exit 1; }
# The options change what a consumer links, not the package's files: every option value
# has the one empty package_id, mpi=False drops the Open MPI requirement and mlflow=False
# the libcurl one.
for opts in "mpi=True mlflow=True" "mpi=False mlflow=False"; do
  set -- $opts
  "$conan" graph info "$src/packaging/conan" -pr:a "$src/packaging/conan/profiles/system" -o "strata/*:$1" \
    -o "strata/*:$2" --format=json >"$work/graph-$1.json" 2>/dev/null
  python3 - "$work/graph-$1.json" "$1" "$2" <<'PY'
import json, sys
nodes = json.load(open(sys.argv[1]))["graph"]["nodes"].values()
names = {n["ref"].split("/")[0] for n in nodes}
root = next(n for n in nodes if n["ref"].startswith("strata/"))
opts = " ".join(sys.argv[2:])
assert root["package_id"] == "da39a3ee5e6b4b0d3255bfef95601890afd80709", f"{opts}: package_id {root['package_id']}"
assert ("openmpi" in names) == (sys.argv[2] == "mpi=True"), f"{opts}: requirements {sorted(names)}"
assert ("libcurl" in names) == (sys.argv[3] == "mlflow=True"), f"{opts}: requirements {sorted(names)}"
PY
done
echo "conan: create and test_package (with strata::mlflow) ran offline; option values share one package"
