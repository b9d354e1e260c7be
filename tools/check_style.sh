#!/usr/bin/env bash
# The style rules that matter, checked rather than hoped for (docs/style.md):
#   1. every tracked .cc/.h is formatted by clang-format 14 with the checked-in .clang-format;
#   2. no function is longer than 70 lines (tools/check_function_length.py);
#   3. Python: pyflakes finds nothing in any tracked .py file, and the ipupod package keeps to
#      its layers without an import cycle (tools/check_python.py; docs/python.md).
# Prints what is wrong and how to fix it; exits 1 if anything is.
#   tools/check_style.sh          check the whole tree
#   tools/check_style.sh --fix    apply clang-format in place (then check lengths)
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cc' '*.h')
status=0

if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${files[@]}"
fi
# One clang-format process for the whole tree; it names each file it would change.
mapfile -t unformatted < <(clang-format --dry-run "${files[@]}" 2>&1 |
  sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: warning: code should be clang-formatted.*/\1/p' | sort -u)
if [ ${#unformatted[@]} -gt 0 ]; then
  echo "check_style: ${#unformatted[@]} file(s) not formatted; run tools/check_style.sh --fix:"
  printf '  %s\n' "${unformatted[@]}"
  status=1
else
  echo "check_style: all ${#files[@]} files formatted"
fi

python3 tools/check_function_length.py --max 70 "${files[@]}" || status=1
# Debian's interpreter: the one python3-pyflakes installs into (deploy/install-deps.sh).
/usr/bin/python3 tools/check_python.py || status=1
exit $status
