#!/usr/bin/env bash
# expect.sh RC REGEX CMD ARGS...: passes when CMD exits with RC and its stdout+stderr matches
# REGEX (extended). Exit code 2 (unusable input) must come with exactly one line on stderr.
set -u
want_rc=$1 regex=$2
shift 2
err=$(mktemp) out=$(mktemp)
"$@" >"$out" 2>"$err"
rc=$?
cat "$out" "$err"
if [[ $rc -ne $want_rc ]]; then echo "FAIL: exit code $rc, expected $want_rc"; exit 1; fi
if ! cat "$out" "$err" | grep -Eq -- "$regex"; then echo "FAIL: output does not match /$regex/"; exit 1; fi
if [[ $want_rc -eq 2 && $(wc -l <"$err") -ne 1 ]]; then echo "FAIL: expected one line on stderr"; exit 1; fi
rm -f "$out" "$err"
exit 0
