"""Graph cleanup passes, one per module, registered by name.

The registry is the single list of passes: config validation, the JSON Schema and
``edgeconv passes list`` take their names from it.
"""

from __future__ import annotations

import dataclasses

from .base import GraphPass, PassResult, Removal, Rewrite
from .lower_conv_to_gemm import LowerConvToGemmPass
from .strip_training import StripTrainingPass

PASSES: dict[str, type[GraphPass]] = {
    cls.name: cls for cls in (StripTrainingPass, LowerConvToGemmPass)
}



def describe() -> list[str]:
    """``edgeconv passes list``: each pass with its summary and the doc of each option."""
    lines = []
    for name, cls in sorted(PASSES.items()):
        lines.append(f"{name}: {cls.summary}")
        lines += [f"    option {field.name}: {field.metadata.get('doc', '')}"
                  for field in dataclasses.fields(cls)]  # type: ignore[arg-type]
    return lines


__all__ = ["PASSES", "GraphPass", "LowerConvToGemmPass", "PassResult", "Removal", "Rewrite", "StripTrainingPass",
           "describe"]
