"""Image folders: every .jpg/.jpeg/.png/.bmp below a folder is one sample, decoded and
preprocessed as the pipeline declares (resize and fit, colour order, layout, scaling)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ..._lazy import lazy_import
from ...errors import DataError, did_you_mean, rel
from ...ir import TensorSpec
from ..config import ColorOrder, DataConfig, Fit, Layout, Preprocess, ResizeMethod
from .base import Field, Reader, Sample, Source

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_import("numpy")

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp")
# Pillow's modes of grayscale pixels wider than 8 bits (a 16-bit PNG opens as I;16, in older Pillows as I).
WIDE_GRAY = ("I;16", "I;16B", "I;16L", "I;16N", "I")


def pick_input(cfg: DataConfig, inputs: Sequence[TensorSpec], location: str) -> TensorSpec:
    """The model input a single-array source feeds: ``cfg.input``, or the model's only input."""
    names = [i.name for i in inputs]
    if cfg.input is not None:
        for spec in inputs:
            if spec.name == cfg.input:
                return spec
        raise DataError(f"{location}: input: {cfg.input!r} is not a model input (inputs: {', '.join(names)})"
                        f"{did_you_mean(cfg.input, names)}")
    if len(inputs) != 1:
        raise DataError(f"{location}: the model has {len(inputs)} inputs ({', '.join(names)}); set input: to the "
                        "one this data feeds")
    return inputs[0]


def spatial_size(spec: TensorSpec, pre: Preprocess) -> tuple[int, int]:
    """(height, width) of a model input in the declared layout."""
    if pre.size is not None:
        return int(pre.size[0]), int(pre.size[1])
    if len(spec.shape) != 4:
        raise DataError(f"input {spec.name!r} has shape {list(spec.shape)}, not an image batch; set "
                        "preprocess.size")
    dims = spec.shape[1:3] if pre.layout is Layout.NHWC else spec.shape[2:4]
    return int(dims[0]), int(dims[1])


def preprocess_image(image: Any, pre: Preprocess, size: tuple[int, int]) -> np.ndarray:
    """A decoded PIL image -> a float32 array in the model's layout and range."""
    from PIL import Image

    if image.mode in WIDE_GRAY:
        # Pillow's convert() clips these at 255 (a 16-bit grayscale photo came out nearly all white); TF's
        # decode_png/decode_image, which Keras's image_dataset_from_directory reads with, keeps the high byte.
        high = np.clip(np.asarray(image), 0, 65535) >> 8  # in its own dtype (uint16, or int32 for I): no copy in int64
        image = Image.fromarray(high.astype(np.uint8), "L")
    image = image.convert("L" if pre.color is ColorOrder.GRAYSCALE else "RGB")
    resample = {ResizeMethod.BILINEAR: Image.Resampling.BILINEAR, ResizeMethod.NEAREST: Image.Resampling.NEAREST,
                ResizeMethod.BICUBIC: Image.Resampling.BICUBIC, ResizeMethod.AREA: Image.Resampling.BOX}[pre.resize]
    height, width = size
    if pre.fit is Fit.STRETCH:
        image = image.resize((width, height), resample)
    else:
        ratio = (max if pre.fit is Fit.CROP else min)(width / image.width, height / image.height)
        scaled = image.resize((max(1, round(image.width * ratio)), max(1, round(image.height * ratio))), resample)
        canvas = Image.new(image.mode, (width, height))
        canvas.paste(scaled, ((width - scaled.width) // 2, (height - scaled.height) // 2))
        image = canvas
    pixels = np.asarray(image, dtype=np.float32)
    if pixels.ndim == 2:
        pixels = pixels[:, :, None]
    if pre.color is ColorOrder.BGR:
        pixels = pixels[:, :, ::-1]
    if pre.scale is not None:
        pixels = pixels * np.float32(pre.scale) + np.float32(pre.offset)
    else:
        pixels = ((pixels - np.asarray(pre.mean, np.float32)) / np.asarray(pre.std, np.float32)).astype(np.float32)
    if pre.layout is Layout.NCHW:
        pixels = pixels.transpose(2, 0, 1)
    return np.ascontiguousarray(pixels, dtype=np.float32)


class _ImageReader(Reader):
    def __init__(self, root: Path, paths: list[Path], spec: TensorSpec, pre: Preprocess) -> None:
        self.location, self.root, self.paths, self.spec, self.pre = rel(root) + "/", root, paths, spec, pre
        self.size = spatial_size(spec, pre)
        channels = 1 if pre.color is ColorOrder.GRAYSCALE else 3
        h, w = self.size
        self.shape = (h, w, channels) if pre.layout is Layout.NHWC else (channels, h, w)

    def fields(self) -> list[Field]:
        return [Field(self.spec.name, self.shape, np.dtype(np.float32))]

    def count(self) -> int:
        return len(self.paths)

    def read(self, indices: Sequence[int]) -> Iterator[tuple[int, Sample]]:
        from PIL import Image, UnidentifiedImageError

        for i in indices:
            path = self.paths[i]
            try:
                with Image.open(path) as image:  # reads the header only
                    w, h = image.size
                    if w * h > MAX_PIXELS:
                        raise DataError(f"{rel(path)}: {w}x{h} pixels, more than the {MAX_PIXELS:,} a calibration "
                                        "image may have (a decompression bomb, or far larger than any model input); "
                                        "downscale it")
                    image.load()
                    array = preprocess_image(image, self.pre, self.size)
            except Image.DecompressionBombError:
                raise DataError(f"{rel(path)}: more than {MAX_PIXELS:,} pixels (a decompression bomb); downscale "
                                "it") from None
            except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
                raise DataError(f"{rel(path)}: cannot read the image ({exc})") from None
            yield i, {self.spec.name: array}

    def where(self, index: int) -> str:
        return rel(self.paths[index])

    def files(self) -> list[Path]:
        return self.paths


MAX_PIXELS = 50_000_000  # a 50-megapixel photo; a decoded image is 3 bytes a pixel before resizing


def image_files(root: Path) -> list[Path]:
    return sorted((p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES),
                  key=lambda p: p.relative_to(root).as_posix())


class ImagesSource(Source):
    name: ClassVar[str] = "images"
    summary: ClassVar[str] = ("A folder of images (.jpg, .jpeg, .png, .bmp; searched recursively), one sample each, "
                              "decoded and preprocessed as declared")

    def open(self, cfg: DataConfig, inputs: Sequence[TensorSpec], base_dir: Path) -> Reader:
        assert cfg.path is not None and cfg.preprocess is not None  # checked with the pipeline file
        paths = image_files(cfg.path)
        if not paths:
            raise DataError(f"{rel(cfg.path)}/: holds no images ({', '.join(IMAGE_SUFFIXES)}, searched recursively)")
        spec = pick_input(cfg, inputs, rel(cfg.path) + "/")
        return _ImageReader(cfg.path, paths, spec, cfg.preprocess)
