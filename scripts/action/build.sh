#!/usr/bin/env bash
# The Action's build step: build the pipelines, write JUnit, the Markdown summary and the results, and
# hand the verdict and paths to the workflow ($GITHUB_OUTPUT). Exits with edgeconv's exit code.
set -uo pipefail
: "${GITHUB_OUTPUT:?set by GitHub Actions}"
EDGECONV="${EDGECONV:-edgeconv}"
out_dir="${RUNNER_TEMP:-${TMPDIR:-/tmp}}/edgeconv"
mkdir -p "$out_dir"
read -r -a pipelines <<< "${INPUT_PIPELINES:-pipeline.yaml}"
args=(build "${pipelines[@]}" --jobs "${INPUT_JOBS:-1}" --junit "$out_dir/junit.xml"
      --summary "$out_dir/summary.md" --results-json "$out_dir/results.json")
if [[ -n "${INPUT_BASELINE:-}" ]]; then
  args+=(--baseline "$INPUT_BASELINE")
fi
if [[ -n "${INPUT_ARGS:-}" ]]; then
  read -r -a extra <<< "$INPUT_ARGS"
  args+=("${extra[@]}")
fi
$EDGECONV "${args[@]}"
code=$?
case "$code" in
  0) verdict=pass ;;
  1) verdict=fail ;;
  2) verdict=error ;;
  *) verdict=crash ;;
esac
reports=""
if [[ -f "$out_dir/results.json" ]]; then
  reports="$(python -c 'import json,sys; print("\n".join(r["report"] for r in json.load(open(sys.argv[1])) if r["report"]))' "$out_dir/results.json")"
fi
{
  echo "verdict=$verdict"
  echo "exit-code=$code"
  echo "junit=$out_dir/junit.xml"
  echo "summary=$out_dir/summary.md"
  echo "reports<<EDGECONV_EOF"
  echo "$reports"
  echo "EDGECONV_EOF"
} >> "$GITHUB_OUTPUT"
exit "$code"
