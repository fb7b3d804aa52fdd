#!/usr/bin/env bash
# The build cache's key for this job: the runner's OS, the Python version and a hash of the pipelines it
# builds, so each job of a matrix keeps an entry of its own (one key for all of them let only one save).
set -euo pipefail
digest="$(printf '%s' "${INPUT_PIPELINES:-pipeline.yaml}" | { sha256sum 2>/dev/null || shasum -a 256; } | cut -c1-16)"
echo "key=edgeconv-build-${RUNNER_OS:-local}-${INPUT_PYTHON_VERSION:-3.11}-$digest" >> "$GITHUB_OUTPUT"
