#!/usr/bin/env bash
# The Action's last step: remove the build-cache entries no build stored or served for inputs.cache-max-age
# before actions/cache saves the folder. Pruning is housekeeping: it never fails the job (a bad age or an
# unwritable cache is a warning).
set -uo pipefail
EDGECONV="${EDGECONV:-edgeconv}"
if ! command -v "$EDGECONV" >/dev/null 2>&1; then
  exit 0  # edgeconv was not installed (an earlier step failed): nothing was cached
fi
if ! $EDGECONV cache prune --older-than "${INPUT_CACHE_MAX_AGE:-30d}"; then
  echo "::warning title=edgeconv::the build cache was not pruned (see the line above); it is saved as it is"
fi
exit 0
