#!/usr/bin/env bash
# Examples and benchmarks are written against the public API only: no header under a
# detail/ folder, no detail:: name (what they need is public: strata::cat, nn::add_into,
# random_stream, ...).   usage: public_api.sh REPO_ROOT
set -euo pipefail
cd "$1"
found=$(grep -rnE '^[[:space:]]*#include.*/detail/|(^|[^A-Za-z0-9_])detail::' examples bench \
          --include='*.cpp' --include='*.cu' --include='*.hpp' --include='*.cuh' || true)
if [ -n "$found" ]; then
  echo "examples/ and bench/ use strata internals (make what they need public instead):"
  echo "$found"
  exit 1
fi
echo "examples/ and bench/ use the public API only"
