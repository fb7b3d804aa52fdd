#!/usr/bin/env bash
# The Action's pip cache: where pip keeps it, and a key from what decides what is installed (the
# Action's own pyproject.toml, the extras, the TensorFlow pin, the runner and Python). Hashed here
# because actions' hashFiles() sees only the workspace, and the Action's path is outside it when
# another repository uses it.
set -euo pipefail
: "${GITHUB_OUTPUT:?set by GitHub Actions}"
: "${EDGECONV_SOURCE:?the checkout of the Action}"
PYTHON="${PYTHON:-python}"
# -I: the working directory is the workspace (a pull request's files), never a place to import from.
digest="$("$PYTHON" -I - "$EDGECONV_SOURCE/pyproject.toml" "${INPUT_EXTRAS:-tf}" "${INPUT_TENSORFLOW_VERSION:-}" <<'PY'
import hashlib
import platform
import sys

path, extras, tf = sys.argv[1:]
h = hashlib.sha256(open(path, "rb").read())
h.update(f"\0{extras.replace(' ', '')}\0{tf}\0{platform.python_version()}".encode())
print(h.hexdigest()[:16])
PY
)"
{
  echo "dir=$("$PYTHON" -I -m pip cache dir 2>/dev/null || echo "$HOME/.cache/pip")"
  echo "key=edgeconv-pip-${RUNNER_OS:-$(uname -s)}-$digest"
} >> "$GITHUB_OUTPUT"
