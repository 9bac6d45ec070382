#!/usr/bin/env bash
# The commands in scripts/ answer as every strata program does: --help prints the usage
# and exits 0; a bad option prints one line and the usage and exits 2, before anything is
# installed or built (scripts/test --help must not run the tests).
# usage: scripts_cli.sh ROOT
set -uo pipefail
root=$1
failed=0
for s in test deps format gpu-check demo plot test-system launch bench cudnn-headers; do
  out=$("$root/scripts/$s" --help 2>&1)
  rc=$?
  if [ $rc != 0 ] || ! grep -q "usage: scripts/$s" <<<"$out"; then echo "FAILED: $s --help: exit $rc: $out"; failed=1; fi
done
# demo passes its options on to the qwen2 program, which answers them after the build.
for s in test deps format gpu-check plot test-system launch bench cudnn-headers; do
  out=$("$root/scripts/$s" --no-such-option 2>&1)
  rc=$?
  if [ $rc != 2 ] || ! grep -q "usage: scripts/$s" <<<"$out" || [ "$(grep -ci "no-such-option" <<<"$out")" != 1 ]; then
    echo "FAILED: $s --no-such-option: exit $rc: $out"
    failed=1
  fi
done
for args in "test extra" "gpu-check results --build-only" "deps --mlflow --conan" "test-system" "test-system debian12" \
  "test-system debian13 extra" "bench extra" "bench --host-only --device-only" "cudnn-headers a b"; do
  # shellcheck disable=SC2086
  out=$("$root/scripts/"$args 2>&1)
  rc=$?
  [ $rc = 2 ] || { echo "FAILED: scripts/$args: exit $rc (expected 2): $out"; failed=1; }
done
# deps on a system it does not know: it names it and the ones it knows, exit 1, and
# installs nothing (it stops before its first apt-get or pip).
fake=$(mktemp)
printf 'ID=fedora\nVERSION_ID=41\nPRETTY_NAME="Fedora Linux 41"\n' >"$fake"
out=$(STRATA_OS_RELEASE=$fake "$root/scripts/deps" 2>&1)
rc=$?
rm -f "$fake"
if [ $rc != 1 ] || ! grep -q "Fedora Linux 41" <<<"$out" || ! grep -q "Debian 12 and 13 and Ubuntu 22.04 and 24.04" <<<"$out" ||
  grep -q "installing" <<<"$out"; then
  echo "FAILED: deps on Fedora 41: exit $rc: $out"
  failed=1
fi
[ $failed = 0 ] && echo "scripts: 10 commands answer --help (0), 9 a bad option (2); deps refuses a system it does not know"
exit $failed
