#!/usr/bin/env bash
# The project speaks of what it does and why, not of how its work was organised: no tracked file
# may name the occasions it was written in. Fails listing file:line for each hit of
#   the word for a sitting of work (any case, ordinal phrases included), and "sprint", "today",
#   "yesterday", "this PR" (the pattern below spells the first in two pieces, so that this file
#   itself holds none of the words it refuses).
# Third-party sources (deps/, untracked) and this script are not checked. An API whose name
# holds such a word would be added to ALLOW (a grep -E pattern matched against the hit's line).
set -euo pipefail
cd "$(dirname "$0")/.."
WORDS='ses''sion|sprint|\btoday\b|\byesterday\b|\bthis PR\b'
ALLOW='^$'
hits=$(git grep -nIiE "$WORDS" -- . ':!deps/' ':!scripts/check-words.sh' | grep -vE "$ALLOW" || true)
if [ -n "$hits" ]; then
    echo "check-words: process words in the tree (say what the code does, not when it was built):" >&2
    echo "$hits" | cut -c1-200 >&2
    exit 1
fi
echo "check-words: no process words"
