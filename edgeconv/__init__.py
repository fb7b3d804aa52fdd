"""edgeconv: declarative, gated conversion of TensorFlow/Keras models to INT8 .tflite.

Public API::

    result = edgeconv.build("pipeline.yaml")        # BuildResult; result.passed
    checked = edgeconv.check("model.tflite", ["generic-int8"])
    config = edgeconv.load_pipeline("pipeline.yaml")  # validation only, no TensorFlow
    edgeconv.prepare_builds()  # before a program starts TensorFlow's runtime: its builds' workers forked

TensorFlow is imported only by the build stages that need it.
"""

import sys as _sys

if _sys.argv[:1] == ["-m"]:  # ``python -m edgeconv``, while runpy imports this package: before any other import
    from ._isolate import no_imports_from_the_working_directory

    no_imports_from_the_working_directory()

from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
    from .building import build
    from .checking import check
    from .config import PipelineConfig, load_pipeline
    from .converters.tflite_export import prepare_builds
    from .errors import ConfigError, DataError, EdgeconvError, InternalError, ModelError, ModelFileError, OutputError
    from .results import BuildResult, CheckResult

__all__ = [
    "BuildResult", "CheckResult", "ConfigError", "DataError", "EdgeconvError", "InternalError", "ModelError",
    "ModelFileError", "OutputError", "PipelineConfig", "__version__", "build", "check", "load_pipeline",
    "prepare_builds",
]
# Where each public name lives. They are imported on first use, so ``edgeconv --help`` (which imports
# this package) loads neither numpy nor YAML.
_HOMES = {"PipelineConfig": "config", "load_pipeline": "config", "BuildResult": "results", "CheckResult": "results",
          "build": "building", "check": "checking", "prepare_builds": "converters.tflite_export",
          **{n: "errors" for n in __all__ if n.endswith("Error")}}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'edgeconv' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
    globals()[name] = value
    return value
