"""Graph cleanup passes, one per module, registered by name.

The registry is the single list of passes: config validation, the JSON Schema and
``edgeconv passes list`` take their names from it.
"""

from __future__ import annotations

from .base import GraphPass, PassResult, Removal, Rewrite
from .lower_conv_to_gemm import LowerConvToGemmPass
from .strip_training import StripTrainingPass

PASSES: dict[str, type[GraphPass]] = {
    cls.name: cls for cls in (StripTrainingPass, LowerConvToGemmPass)
}

__all__ = ["PASSES", "GraphPass", "LowerConvToGemmPass", "PassResult", "Removal", "Rewrite", "StripTrainingPass"]
