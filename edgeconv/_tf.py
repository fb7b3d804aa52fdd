"""The one place TensorFlow is imported (lazily, by the stages that need it)."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from .errors import EdgeconvError

INSTALL_HINT = "pip install 'edgeconv[tf]'"


def quiet_tf_env(env: dict[str, str] | os._Environ[str]) -> None:
    """TF's C++ log noise off; oneDNN off (its kernels reorder float math from run to run)."""
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")


_IMPORT_SECONDS: list[float] = []  # how long this process's first import took (when import_tf made it)


def import_tf() -> Any:
    quiet_tf_env(os.environ)
    first = "tensorflow" not in sys.modules
    start = time.perf_counter()
    try:
        import tensorflow as tf
    except ImportError:
        raise EdgeconvError(f"building needs TensorFlow, which is not installed: {INSTALL_HINT}") from None
    if first and not _IMPORT_SECONDS:
        _IMPORT_SECONDS.append(time.perf_counter() - start)
    tf.get_logger().setLevel("ERROR")
    return tf


def import_seconds() -> float | None:
    """How long TensorFlow's import took in this process, when edgeconv imported it (None otherwise)."""
    return _IMPORT_SECONDS[0] if _IMPORT_SECONDS else None
