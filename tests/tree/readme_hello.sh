#!/usr/bin/env bash
# The README's "Using it" program is examples/hello/main.cpp, word for word: the code a
# reader copies is the code CI compiles and runs.   usage: readme_hello.sh REPO_ROOT
set -euo pipefail
cd "$1"
readme_code=$(awk '/^## Using it/ {in_section = 1; next}
                   in_section && /^```cpp/ {in_code = 1; next}
                   in_code && /^```/ {exit}
                   in_code {print}' README.md)
if [ -z "$readme_code" ]; then
  echo "README.md has no \`\`\`cpp block under '## Using it'"
  exit 1
fi
if ! diff -u <(printf '%s\n' "$readme_code") examples/hello/main.cpp; then
  echo "README.md's 'Using it' code and examples/hello/main.cpp differ (above: - README, + example); make them the same"
  exit 1
fi
echo "README.md's 'Using it' code is examples/hello/main.cpp"
