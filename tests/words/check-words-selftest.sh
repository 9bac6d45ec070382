#!/usr/bin/env bash
# The words check (scripts/check-words) run on a directory of its own: it must fail on a
# file that names the tracker or a session of our work, pass the MPI session, trace_session
# and the other code uses, answer --help with 0 and a bad option with 2. What it would
# catch: a checker that passes everything (an empty file list, a pattern that never
# matches), or one that flags code (trace_session, the MPI session) so that it cannot be
# kept green.
set -u
here=$(cd "$(dirname "$0")" && pwd)
check="$here/../../scripts/check-words"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
expect() {  # expect WANT_RC DESCRIPTION -- command...
  local want=$1 what=$2 rc
  shift 3
  "$@" >"$dir/out" 2>&1
  rc=$?
  if [ "$rc" -ne "$want" ]; then
    echo "FAIL: $what: exit $rc, want $want"; sed 's/^/  | /' "$dir/out"; fail=1
  else
    echo "ok: $what (exit $rc)"
  fi
}

mkdir -p "$dir/ok/docs/gpu-runs" "$dir/bad/include"
cat >"$dir/ok/allowed.md" <<'TXT'
# Allowed
The MPI session starts once; `trace_session` writes the file, and an mpi session ends at
exit. Catch's session is compiled once; env_session and traceSession are identifiers.
Decided 2026-12-04 (commit 137e009, docs/decisions/0001-example.md); a reduce stops at 3
ranks only in prose like this, which names no stop.
TXT
cat >"$dir/ok/docs/gpu-runs/log.md" <<'TXT'
the GPU session of 2026-12-04 (a machine's log, not scanned)
TXT
cat >"$dir/bad/include/offending.hpp" <<'TXT'
// Fixed in stop 33 (issue #14 item 2); the next session measures it.
TXT
cat >"$dir/bad/allowed.md" <<'TXT'
The MPI session starts once.
TXT

expect 0 "allowed words pass" -- "$check" --root "$dir/ok"
expect 1 "tracker words fail" -- "$check" --root "$dir/bad"
if ! grep -q '^include/offending.hpp:1: ' "$dir/out"; then
  echo "FAIL: the hit is not printed as FILE:LINE: TEXT"; cat "$dir/out"; fail=1
fi
if grep -q 'allowed.md' "$dir/out"; then
  echo "FAIL: the allowed file was reported"; cat "$dir/out"; fail=1
fi
for line in "as stop 34 found" "see issue #13" "#15 item 4" "items 1-2 of the issue" \
            "a GPU session" "this session" "sessions so far" "per session" \
            "the session that ran it" "an earlier session"; do
  rm -rf "$dir/one"; mkdir -p "$dir/one"; echo "x $line y" >"$dir/one/a.md"
  expect 1 "flags '$line'" -- "$check" --root "$dir/one"
done
for line in "the MPI session" "one MPI session for the whole program" "a trace session is on" \
            "Catch::Session session;" "session.run(argc, argv)" "an mpi session"; do
  rm -rf "$dir/one"; mkdir -p "$dir/one"; echo "x $line y" >"$dir/one/a.cpp"
  expect 0 "passes '$line'" -- "$check" --root "$dir/one"
done
expect 0 "--help" -- "$check" --help
expect 2 "a bad option" -- "$check" --no-such-option
expect 2 "--root without a directory" -- "$check" --root
exit $fail
