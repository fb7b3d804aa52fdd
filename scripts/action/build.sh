#!/usr/bin/env bash
# The Action's build step: build the pipelines (or this job's shard of them), write JUnit, the Markdown
# summary and the results, and hand the verdict and paths to the workflow ($GITHUB_OUTPUT). With mode
# summarize: merge the results files of a matrix's jobs into one verdict instead. Exits with edgeconv's
# exit code.
# Its working directory is the workspace, a pull request's files: every Python it runs is isolated from
# it (-I: no workspace module, no PYTHON* variable), and no path from a pipeline reaches $GITHUB_OUTPUT
# unless it is plain text (no control character, quote or newline) under a random heredoc delimiter.
set -uo pipefail
: "${GITHUB_OUTPUT:?set by GitHub Actions}"
EDGECONV="${EDGECONV:-edgeconv}"
PYTHON="${PYTHON:-python}"
out_dir="${RUNNER_TEMP:-${TMPDIR:-/tmp}}/edgeconv"
mkdir -p "$out_dir"

# An input split as a shell would (quotes keep spaces), one word per line; a bad quote is the user's error.
words() {
  "$PYTHON" -I - "$1" "$2" <<'PY'
import shlex
import sys

name, text = sys.argv[1:]
try:
    print("\n".join(shlex.split(text)))
except ValueError as exc:
    sys.exit(f"edgeconv action: error: inputs.{name}: {exc}: {text}")
PY
}

fail_input() {
  { echo "verdict=error"; echo "exit-code=2"; } >> "$GITHUB_OUTPUT"
  exit 2
}

mode="${INPUT_MODE:-build}"
if [[ "$mode" == "summarize" ]]; then
  listed="$(words results "${INPUT_RESULTS:-}")" || fail_input
  files=()
  while IFS= read -r line; do [[ -n "$line" ]] && files+=("$line"); done <<< "$listed"
  if [[ ${#files[@]} -eq 0 ]]; then
    echo "edgeconv action: error: inputs.results: mode summarize needs the jobs' results files" >&2
    fail_input
  fi
  # Quoted globs are expanded here (sorted; one that matches nothing is kept, and edgeconv names it).
  listed="$("$PYTHON" -I - "${files[@]}" <<'PY'
import glob
import sys

for pattern in sys.argv[1:]:
    found = sorted(glob.glob(pattern)) if any(c in pattern for c in "*?[") else []
    print("\n".join(found or [pattern]))
PY
)"
  args=(summary --junit "$out_dir/junit.xml" --summary "$out_dir/summary.md" --)  # a file named -x is a file
  while IFS= read -r line; do args+=("$line"); done <<< "$listed"
elif [[ "$mode" == "build" ]]; then
  listed="$(words pipelines "${INPUT_PIPELINES:-pipeline.yaml}")" || fail_input
  pipelines=()  # one per line (a while-read loop: macOS runners ship bash 3.2, which has no mapfile)
  while IFS= read -r line; do pipelines+=("$line"); done <<< "$listed"
  args=(build "${pipelines[@]}" --jobs "${INPUT_JOBS:-1}" --junit "$out_dir/junit.xml"
        --summary "$out_dir/summary.md" --results-json "$out_dir/results.json")
  if [[ -n "${INPUT_SHARD:-}" ]]; then
    args+=(--shard "$INPUT_SHARD")
  fi
  if [[ -n "${INPUT_CACHE_URL:-}" ]]; then
    args+=(--cache-dir "$INPUT_CACHE_URL")
  fi
  if [[ -n "${INPUT_BASELINE:-}" ]]; then
    args+=(--baseline "$INPUT_BASELINE")
  fi
  if [[ -n "${INPUT_ARGS:-}" ]]; then
    listed="$(words args "$INPUT_ARGS")" || fail_input
    while IFS= read -r line; do args+=("$line"); done <<< "$listed"
  fi
else
  echo "edgeconv action: error: inputs.mode: expected build or summarize, got '$mode'" >&2
  fail_input
fi
rm -f "$out_dir/results.json" "$out_dir/junit.xml" "$out_dir/summary.md"  # nothing from an earlier step
$EDGECONV "${args[@]}"
code=$?
case "$code" in
  0) verdict=pass ;;
  1) verdict=fail ;;
  2) verdict=error ;;
  *) verdict=crash ;;
esac
reports=""
if [[ -f "$out_dir/results.json" && "$mode" == "build" ]]; then
  # A report path is a pipeline's output.dir: one with a control character or a quote is left out (and said).
  reports="$("$PYTHON" -I - "$out_dir/results.json" <<'PY'
import json
import re
import sys

for result in json.load(open(sys.argv[1]))["results"]:
    report = result.get("report") or ""
    if isinstance(report, str) and report:
        if re.search(r"[\x00-\x1f\x7f\"'`$]", report):
            print(f"edgeconv action: warning: report path {report!r} left out of the outputs (control characters "
                  "or quotes)", file=sys.stderr)
        else:
            print(report)
PY
)"
fi
delimiter="EDGECONV_$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
{
  echo "verdict=$verdict"
  echo "exit-code=$code"
  echo "junit=$out_dir/junit.xml"
  echo "summary=$out_dir/summary.md"
  echo "reports<<$delimiter"
  echo "$reports"
  echo "$delimiter"
  if [[ -f "$out_dir/results.json" && "$mode" == "build" ]]; then echo "results=$out_dir/results.json"; fi
} >> "$GITHUB_OUTPUT"
exit "$code"
