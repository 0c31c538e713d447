#!/usr/bin/env bash
# Mutation check for the partition acceptance test: in a temporary copy of the repository, remove
# the fence comparison from every guarded write (the SQL predicates and the transaction's check),
# rebuild, and run test/it-leases-fencing.test.ts. The check passes only if the test FAILS there,
# i.e. the test really depends on the fence deciding writes.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d /tmp/leasehold-mutant-XXXXXX)"
trap '[ -n "${KEEP_MUTANT:-}" ] || rm -rf "$work"' EXIT

tar -C "$repo" --exclude=./node_modules --exclude=./.git --exclude='*/dist' --exclude='*.tsbuildinfo' \
  --exclude=./.leasehold --exclude=./.scratch -cf - . | tar -C "$work" -xf -
# The mutant shares the installed dependencies, but its @leasehold packages are its own copies:
# the test process and the worker processes it spawns must all load the mutated store.
mkdir -p "$work/node_modules/@leasehold"
for entry in "$repo"/node_modules/* "$repo"/node_modules/.bin; do
  [ "$(basename "$entry")" = "@leasehold" ] || ln -s "$entry" "$work/node_modules/$(basename "$entry")"
done
for p in core sql cli; do ln -s "$work/packages/$p" "$work/node_modules/@leasehold/$p"; done

guarded="$work/packages/sql/src/statements/guarded.ts"
before=$(grep -c "fence" "$guarded")
sed -i -E 's/ AND fence = \$\{[^}]*\}::bigint//g; s/ AND r\.fence = i\.fence//g; s/if \(stored !== lease\.fence\)/if (false)/' "$guarded"
after=$(grep -c "fence" "$guarded")
echo "mutation: removed fence comparisons from $guarded ($before -> $after lines mentioning fence)"
grep -n "AND fence = \|r.fence = i.fence\|stored !== lease.fence" "$guarded" && { echo "mutation incomplete"; exit 2; }

cd "$work"
# Node 24 from the dev dependency, as npm scripts would run it.
export PATH="$work/node_modules/.bin:$PATH"
node_modules/.bin/tsc -b >/dev/null
set +e
node_modules/.bin/vitest run test/it-leases-fencing.test.ts > "$work/mutant.log" 2>&1
status=$?
set -e
grep -E "✓|×|AssertionError|Tests " "$work/mutant.log" | sed 's/\x1b\[[0-9;]*m//g' | head -20
if [ "$status" -eq 0 ]; then
  echo "MUTATION SURVIVED: the acceptance test passed without the fence check"
  exit 1
fi
echo "mutation killed: the acceptance test fails without the fence check (vitest exit $status)"
