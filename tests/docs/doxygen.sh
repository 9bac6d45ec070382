#!/usr/bin/env bash
# The reference documentation builds from the public headers' comments with no Doxygen
# warning, leaves out detail namespaces, and carries the headers' comments (through
# tools/doxygen_filter.py) into the pages.
# usage: doxygen.sh SOURCE_DIR WORK_DIR
set -euo pipefail
src=$1 work=$2
command -v doxygen >/dev/null || { echo "doxygen.sh: no doxygen (scripts/deps installs it)" >&2; exit 1; }
rm -rf "$work" && mkdir -p "$work"
cd "$src"
# Doxygen runs the filter once per header: by the interpreter's own path, not through a
# python3 that may be a shim (pyenv's took 40 of this test's 45 s here).
py=$(python3 -c 'import sys; print(sys.executable)')
{ cat docs/Doxyfile; echo "INPUT_FILTER = \"$py -S tools/doxygen_filter.py\""; } |
  STRATA_DOCS_OUT=$work doxygen - >"$work/doxygen.log" 2>&1 || { cat "$work/doxygen.log"; exit 1; }
if [ -s "$work/warnings.log" ]; then
  echo "doxygen.sh: $(wc -l <"$work/warnings.log") warnings:"
  cat "$work/warnings.log"
  exit 1
fi
html=$work/html
for page in index.html classstrata_1_1trainer.html structstrata_1_1adamw.html structstrata_1_1step__stats.html; do
  [ -f "$html/$page" ] || { echo "doxygen.sh: no $page"; exit 1; }
done
if grep -q "detail" <<<"$(ls "$html")"; then
  echo "doxygen.sh: pages of detail namespaces: $(ls "$html" | grep detail | head -3)"
  exit 1
fi
# A member's trailing comment and a file's top comment, as written in the header.
grep -q "mean over the global batch" "$html/structstrata_1_1step__stats.html" ||
  { echo "doxygen.sh: step_stats::loss lost its comment"; exit 1; }
grep -q "torch.optim.AdamW semantics" "$html"/optim_2adamw_8hpp.html ||
  { echo "doxygen.sh: optim/adamw.hpp lost its file comment"; exit 1; }
echo "doxygen: $(ls "$html"/*.html | wc -l) pages, no warnings"
