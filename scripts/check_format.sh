#!/usr/bin/env bash
# The C++ layout of the tree is .clang-format's, as clang-format 14 (Debian 12's, installed by
# scripts/deps.sh) writes it. Another version lays some lines out differently, so the check
# names the one it needs rather than judging with whatever clang-format is on the PATH.
#   scripts/check_format.sh          list the files that differ (exit 1 if any)
#   scripts/check_format.sh --fix    rewrite them in place
# Tables laid out by hand sit between "// clang-format off" and "// clang-format on".
set -euo pipefail
cd "$(dirname "$0")/.."
CF=${CLANG_FORMAT:-clang-format-14}
if ! command -v "$CF" > /dev/null 2>&1; then
  echo "check_format.sh: $CF not found (scripts/deps.sh installs it; CLANG_FORMAT=... names another)" >&2
  exit 1
fi
git rev-parse --git-dir > /dev/null 2>&1 || { echo "check_format.sh: not a git checkout" >&2; exit 77; }
mapfile -t files < <(git ls-files -- '*.cpp' '*.hpp' '*.h' '*.cc' '*.cu' '*.cuh' ':!:third_party/')
if [ "${1:-}" = "--fix" ]; then
  "$CF" -i "${files[@]}"
  exit 0
fi
# One run over every file; its diagnostics begin "path:line:col: error".
if ! out=$("$CF" --dry-run -Werror "${files[@]}" 2>&1); then
  printf 'not laid out as .clang-format says (scripts/check_format.sh --fix rewrites them):\n' >&2
  printf '%s\n' "$out" | grep -o '^[^:]*:[0-9]*' | sort -u -t: -k1,1 | sed 's/^/  /' >&2
  exit 1
fi
echo "check_format.sh: ${#files[@]} files follow .clang-format"
