"""The one place TensorFlow is imported (lazily, by the stages that need it)."""

from __future__ import annotations

import os
from typing import Any

from .errors import EdgeconvError

INSTALL_HINT = "pip install 'edgeconv[tf]'"


def quiet_tf_env(env: dict[str, str] | os._Environ[str]) -> None:
    """TF's C++ log noise off; oneDNN off (its kernels reorder float math from run to run)."""
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")


def import_tf() -> Any:
    quiet_tf_env(os.environ)
    try:
        import tensorflow as tf
    except ImportError:
        raise EdgeconvError(f"building needs TensorFlow, which is not installed: {INSTALL_HINT}") from None
    tf.get_logger().setLevel("ERROR")
    return tf
