"""edgeconv: declarative, gated conversion of TensorFlow/Keras models to INT8 .tflite.

Public API::

    result = edgeconv.build("pipeline.yaml")        # BuildResult; result.passed
    checked = edgeconv.check("model.tflite", ["generic-int8"])
    config = edgeconv.load_pipeline("pipeline.yaml")  # validation only, no TensorFlow

TensorFlow is imported only by the build stages that need it.
"""

from ._version import __version__
from .config import PipelineConfig, load_pipeline
from .errors import ConfigError, DataError, EdgeconvError, InternalError, ModelError, ModelFileError, OutputError
from .pipeline import BuildResult, CheckResult, build, check

__all__ = [
    "BuildResult", "CheckResult", "ConfigError", "DataError", "EdgeconvError", "InternalError", "ModelError",
    "ModelFileError", "OutputError", "PipelineConfig", "__version__", "build", "check", "load_pipeline",
]
