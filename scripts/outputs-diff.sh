#!/usr/bin/env bash
# Compares two folders written by scripts/outputs-snapshot.sh: every file byte for byte, after
# replacing each folder's own path with OUT (outputs name the files they wrote) and dropping the
# lines that carry the wall clock (`mig export`'s comment). Exit 0 when identical.
#
#   bash scripts/outputs-diff.sh BEFORE AFTER
set -euo pipefail
a=${1:?usage: outputs-diff.sh BEFORE AFTER}
b=${2:?usage: outputs-diff.sh BEFORE AFTER}
norm() { sed -e "s|$1|OUT|g" -e '/^comment: exported by tessera mig export/d' "$2"; }
status=0
for f in $(cd "$a" && ls; cd "$b" && ls); do echo "$f"; done | sort -u | while read -r f; do
  if [ ! -f "$a/$f" ] || [ ! -f "$b/$f" ]; then
    echo "only in one: $f"
    exit 1
  fi
  if ! diff <(norm "$a" "$a/$f") <(norm "$b" "$b/$f") >/tmp/outputs-diff.$$; then
    echo "differs: $f"
    head -20 /tmp/outputs-diff.$$
    exit 1
  fi
done || status=1
rm -f /tmp/outputs-diff.$$
[ $status -eq 0 ] && echo "identical: $(ls "$a" | wc -l) files"
exit $status
