#!/usr/bin/env bash
# Runs one test file N times in a row and reports how many passed; stops nothing on failure, so
# the count is honest. Usage: scripts/repeat-test.sh 20 test/it-leases-fencing.test.ts
set -uo pipefail
count="${1:?how many times}"
file="${2:?which test file}"
cd "$(dirname "$0")/.."
export PATH="$PWD/node_modules/.bin:$PATH"
npm run build --silent
passed=0
for i in $(seq 1 "$count"); do
  if vitest run "$file" > "/tmp/repeat-$i.log" 2>&1; then
    passed=$((passed + 1))
    echo "run $i: pass"
  else
    echo "run $i: FAIL (log: /tmp/repeat-$i.log)"
  fi
done
echo "$passed/$count passed: $file"
[ "$passed" -eq "$count" ]
