#!/usr/bin/env bash
# The Action's install step: edgeconv with its extras from the Action's own checkout, and TensorFlow
# pinned when the workflow asks (tensorflow-cpu on x86-64 Linux, as edgeconv[tf] does), in one pip
# run: one resolution, one TensorFlow download.
set -euo pipefail
: "${EDGECONV_SOURCE:?the checkout of the Action}"
PYTHON="${PYTHON:-python}"
extras="${INPUT_EXTRAS:-tf}"
extras="${extras// /}"
packages=("${EDGECONV_SOURCE}[${extras}]")
if [[ "${INPUT_MODE:-build}" == "summarize" ]]; then
  packages=("${EDGECONV_SOURCE}")  # merging results files needs no TensorFlow
elif [[ -n "${INPUT_TENSORFLOW_VERSION:-}" ]]; then
  if [[ "$(uname -s)" == "Linux" && "$(uname -m)" == "x86_64" ]]; then
    packages+=("tensorflow-cpu${INPUT_TENSORFLOW_VERSION}")
  else
    packages+=("tensorflow${INPUT_TENSORFLOW_VERSION}")
  fi
fi
# -I: the working directory is the workspace (a pull request's files), never a place to import from.
"$PYTHON" -I -m pip install --upgrade pip
"$PYTHON" -I -m pip install "${packages[@]}"
"$PYTHON" -I -m edgeconv --version
