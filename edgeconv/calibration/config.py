"""The ``calibration`` and ``evaluation`` sections of the pipeline file: where samples come
from and how raw data (images, records, CSV rows) becomes model input.

One shape of section serves every source; the keys that belong to one source are
errors for the others (a setting that would silently do nothing is a mistake).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from pathlib import Path

from .._record import record
from .._schema import setting


class ResizeMethod(enum.Enum):
    BILINEAR = "bilinear"
    NEAREST = "nearest"
    BICUBIC = "bicubic"
    AREA = "area"


class Fit(enum.Enum):
    STRETCH = "stretch"  # resize to the size, ignoring the aspect ratio
    CROP = "crop"  # keep the aspect ratio, scale to cover, centre-crop
    PAD = "pad"  # keep the aspect ratio, scale to fit, pad with zeros (black) around


class ColorOrder(enum.Enum):
    RGB = "rgb"
    BGR = "bgr"
    GRAYSCALE = "grayscale"


class Layout(enum.Enum):
    NHWC = "nhwc"
    NCHW = "nchw"


class FeatureType(enum.Enum):
    FLOAT32 = "float32"
    INT64 = "int64"
    BYTES = "bytes"


class Decode(enum.Enum):
    NONE = "none"  # a numeric feature, reshaped to ``shape``
    IMAGE = "image"  # encoded PNG/JPEG/BMP/GIF bytes, decoded and preprocessed
    RAW = "raw"  # raw uint8 bytes, reshaped to ``shape``


@record
class Preprocess:
    """How a decoded image (pixel values 0-255) becomes a model input."""

    size: tuple[int, ...] | None = setting("[height, width] after resizing; default: the model input's.",
                                           default=None)
    resize: ResizeMethod = setting("Resampling filter.", default=ResizeMethod.BILINEAR)
    fit: Fit = setting("stretch: ignore the aspect ratio; crop: keep it and centre-crop; pad: keep it and pad.",
                       default=Fit.STRETCH)
    color: ColorOrder = setting("Channel order the model expects.", default=ColorOrder.RGB)
    layout: Layout = setting("Tensor layout the model expects.", default=Layout.NHWC)
    scale: float | None = setting("input = pixel * scale + offset (e.g. 0.00392156862745098 for [0, 1]); "
                                  "or give mean/std.", default=None)
    offset: float = setting("Added after scale.", default=0.0)
    mean: tuple[float, ...] = setting("input = (pixel - mean) / std, per channel (or one value for all).",
                                      factory=tuple)
    std: tuple[float, ...] = setting("See mean.", factory=tuple)

    def value_range(self, channels: int) -> tuple[float, float]:
        """The model input range pixels 0-255 map to."""
        if self.scale is not None:
            ends = (self.offset, 255 * self.scale + self.offset)
            return min(ends), max(ends)
        mean = list(self.mean) * (channels if len(self.mean) == 1 else 1)
        std = list(self.std) * (channels if len(self.std) == 1 else 1)
        los = [min((0 - m) / s, (255 - m) / s) for m, s in zip(mean, std)]
        his = [max((0 - m) / s, (255 - m) / s) for m, s in zip(mean, std)]
        return min(los), max(his)


@record
class FeatureSpec:
    """One feature of a TFRecord ``tf.train.Example``, feeding one model input."""

    key: str | None = setting("Feature key in the record; default: the model input's name.", default=None)
    dtype: FeatureType = setting("Feature type in the record.", default=FeatureType.FLOAT32)
    shape: tuple[int, ...] = setting("Shape of one sample (numeric and raw features).", factory=tuple)
    decode: Decode = setting("none: numeric; image: encoded image bytes (preprocessed); raw: uint8 bytes.",
                             default=Decode.NONE)


@record
class DataConfig:
    """Samples keyed by model input name, from one of the registered sources."""

    path: Path | None = setting("File or folder, relative to the pipeline file.", default=None, must_exist=True)
    source: str | None = setting("Source kind; by default picked from the file suffix or the folder's files.",
                                 default=None, choices=lambda: _source_names())
    input: str | None = setting("Model input a single-array source feeds (npy, images); default: the model's only "
                                "input.", default=None)
    preprocess: Preprocess | None = setting("images, tfrecord image features: how pixels become model input.",
                                            default=None)
    features: Mapping[str, FeatureSpec] = setting("tfrecord: model input name -> feature.", factory=dict)
    columns: Mapping[str, tuple[str, ...]] = setting("csv: model input name -> column names.", factory=dict)
    window: int | None = setting("csv: rows per sample (a sensor window); default: one row per sample.",
                                 default=None, minimum=1)
    stride: int | None = setting("csv: rows between window starts; default: the window length.",
                                 default=None, minimum=1)
    function: str | None = setting("python: 'module:function' returning an iterable of {input_name: array}; "
                                   "the module is looked up next to the pipeline file.", default=None)
    trust_code: bool = setting("python: run the function (it is code from the pipeline's folder).",
                               default=False)


@record
class CalibrationConfig(DataConfig):
    """Representative data for calibration, keyed by model input name."""

    samples: int = setting("Number of samples drawn (without replacement) from the data; when it holds fewer, all "
                           "of them (a note; fewer than min_samples is the finding).", default=200, minimum=1)
    seed: int = setting("Seed of the sample draw, so a build is reproducible.", default=0, minimum=0)
    min_samples: int = setting("Fewer samples than this is a warning (below 10 an error).", default=100,
                               minimum=1)
    expected_range: Mapping[str, tuple[float, ...]] = setting(
        "Model input name -> [low, high] the model was trained on; checked against the data and the .tflite's "
        "input quantization (images: implied by preprocess).", factory=dict)


@record
class EvaluationConfig(DataConfig):
    """Held-out data for checks against calibration (ranges now; accuracy later)."""

    samples: int | None = setting("Samples drawn from the data; default: all.", default=None, minimum=1)
    seed: int = setting("Seed of the sample draw.", default=0, minimum=0)
    labels: str | None = setting("Array, feature or column that holds the labels (not a model input).",
                                 default=None)


def _source_names() -> list[str]:
    from .sources import SOURCES  # the registry imports this module

    return list(SOURCES)


# Keys that only some sources take.
SOURCE_KEYS: dict[str, tuple[str, ...]] = {
    "input": ("npy", "images"),
    "preprocess": ("images", "tfrecord"),
    "features": ("tfrecord",),
    "columns": ("csv",),
    "window": ("csv",),
    "stride": ("csv",),
    "function": ("python",),
    "trust_code": ("python",),
}
HARD_FLOOR = 10  # fewer calibration samples than this is refused


def set_keys(cfg: DataConfig) -> list[str]:
    """The source-specific keys ``cfg`` sets (differs from the default)."""
    out = []
    for key in SOURCE_KEYS:
        field = next(f for f in dataclasses.fields(cfg) if f.name == key)
        default = field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
        if getattr(cfg, key) != default:
            out.append(key)
    return out
