"""Calibration data without TensorFlow: every source but TFRecord, the signature checks, the
seeded and hashed sample set, statistics and the silent-killer warnings."""

from __future__ import annotations

import dataclasses
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgeconv import DataError
from edgeconv.calibration import SOURCES, resolve_source
from edgeconv.calibration.checks import data_warnings
from edgeconv.calibration.config import CalibrationConfig, ColorOrder, Fit, Layout, Preprocess
from edgeconv.calibration.samples import SampleSet, Stats, collect, match_fields
from edgeconv.calibration.sources import UNNAMED, Field
from edgeconv.ir import TensorSpec

IMAGE = TensorSpec("image", "image:0", (1, 6, 5, 2), "float32")
TOKENS = TensorSpec("tokens", "tokens:0", (1, 7), "int32")
SENSOR = TensorSpec("imu", "imu:0", (1, 4, 3), "float32")


@pytest.fixture(autouse=True)
def _cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def rng_images(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((n, 6, 5, 2), dtype=np.float32)


def cfg(path: str | None = None, **kwargs: Any) -> CalibrationConfig:
    return CalibrationConfig(path=Path(path).resolve() if path else None, **kwargs)


def read_all(source: str, config: CalibrationConfig, inputs: list[TensorSpec]) -> dict[int, dict[str, np.ndarray]]:
    reader = SOURCES[source]().open(config, inputs, Path.cwd())
    try:
        return {i: {k: v.copy() for k, v in s.items()} for i, s in reader.read(range(reader.count()))}
    finally:
        reader.close()


def spool(source: str, config: CalibrationConfig, inputs: list[TensorSpec], tmp_path: Path, samples: int | None,
          seed: int = 0) -> SampleSet:
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    reader = SOURCES[source]().open(config, inputs, Path.cwd())
    return collect(reader, inputs, role="calibration", source=source, samples=samples, seed=seed, folder=folder)


# -- NumPy sources --------------------------------------------------------------------------------

@pytest.mark.parametrize("compressed", [False, True])
def test_npz_rows_are_read_one_at_a_time(tmp_path: Path, compressed: bool) -> None:
    images, tokens = rng_images(9), np.arange(63, dtype=np.int32).reshape(9, 7)
    (np.savez_compressed if compressed else np.savez)(tmp_path / "c.npz", image=images, tokens=tokens)
    reader = SOURCES["npz"]().open(cfg("c.npz"), [IMAGE, TOKENS], tmp_path)
    assert reader.count() == 9
    assert reader.fields() == [Field("image", (6, 5, 2), np.dtype(np.float32)), Field("tokens", (7,),
                                                                                      np.dtype(np.int32))]
    got = dict(reader.read([1, 4, 8]))
    reader.close()
    assert sorted(got) == [1, 4, 8]
    np.testing.assert_array_equal(got[4]["image"], images[4])
    np.testing.assert_array_equal(got[8]["tokens"], tokens[8])


def test_npy_and_npy_folder(tmp_path: Path) -> None:
    np.save(tmp_path / "one.npy", rng_images(4))
    (tmp_path / "per_input").mkdir()
    np.save(tmp_path / "per_input" / "image.npy", rng_images(5, seed=1))
    np.save(tmp_path / "per_input" / "tokens.npy", np.ones((5, 7), np.int32))
    assert [f.name for f in SOURCES["npy"]().open(cfg("one.npy"), [IMAGE], tmp_path).fields()] == [UNNAMED]
    named = SOURCES["npy"]().open(cfg("one.npy", input="image"), [IMAGE], tmp_path)
    assert [f.name for f in named.fields()] == ["image"]
    rows = read_all("npy-dir", cfg("per_input"), [IMAGE, TOKENS])
    assert len(rows) == 5
    np.testing.assert_array_equal(rows[2]["image"], rng_images(5, seed=1)[2])
    assert resolve_source(cfg("per_input")) == "npy-dir"


@pytest.mark.parametrize(("make", "message"), [
    (lambda p: p.write_bytes(b"not a zip"), "c.npz: not a readable .npz archive (File is not a zip file)"),
    (lambda p: np.savez(p, image=np.array([{"a": 1}], dtype=object)),
     "c.npz: array 'image': holds Python objects (object); save plain numeric arrays"),
    (lambda p: np.savez(p, image=np.zeros((0, 6, 5, 2), np.float32)),
     "c.npz: array 'image': holds no samples (shape (0, 6, 5, 2)); the first axis counts samples"),
    (lambda p: np.savez(p, image=np.array(["a", "b"])), "c.npz: array 'image': has dtype <U1, expected numbers"),
    (lambda p: np.savez(p, image=np.asfortranarray(rng_images(3))),
     "c.npz: array 'image': is stored in Fortran order; save it C-ordered (np.ascontiguousarray)"),
    (lambda p: np.savez(p, image=rng_images(4), tokens=np.ones((3, 7), np.int32)),
     "c.npz: inputs have different sample counts: 'image': 4, 'tokens': 3"),
    (lambda p: np.savez(p), "c.npz: holds no arrays"),
])
def test_unreadable_npz(tmp_path: Path, make: Any, message: str) -> None:
    make(tmp_path / "c.npz")
    with pytest.raises(DataError) as err:
        SOURCES["npz"]().open(cfg("c.npz"), [IMAGE], tmp_path)
    assert str(err.value) == message


def test_truncated_npy_names_the_sample(tmp_path: Path) -> None:
    np.save(tmp_path / "c.npy", rng_images(6))
    data = (tmp_path / "c.npy").read_bytes()
    (tmp_path / "c.npy").write_bytes(data[:-100])
    with pytest.raises(DataError, match=r"^c\.npy: truncated at sample 5 \(the header says 6 samples\)$"):
        read_all("npy", cfg("c.npy"), [IMAGE])


# -- signature checks --------------------------------------------------------------------------------

F_IMAGE = Field("image", (6, 5, 2), np.dtype(np.float32))


@pytest.mark.parametrize(("fields", "inputs", "message"), [
    ([dataclasses.replace(F_IMAGE, name="imgae")], [IMAGE],
     "c.npz: array 'imgae' is not a model input (inputs: image); did you mean 'image'?\n"
     "c.npz: no array for model input 'image' (arrays: imgae); did you mean 'imgae'?"),
    ([F_IMAGE, Field("label", (), np.dtype(np.int64))], [IMAGE],
     "c.npz: array 'label' is not a model input (inputs: image)"),
    ([dataclasses.replace(F_IMAGE, shape=(5, 6, 2))], [IMAGE],
     "c.npz: input 'image' has samples of shape (5, 6, 2), the model expects (6, 5, 2) (array shape (N, 6, 5, 2) "
     "for model input shape (1, 6, 5, 2))"),
    ([dataclasses.replace(F_IMAGE, dtype=np.dtype(np.uint8))], [IMAGE],
     "c.npz: input 'image' is uint8 but the model input is float32: apply the model's preprocessing (e.g. scale to "
     "the range it was trained on) and save float data"),
    ([Field("tokens", (7,), np.dtype(np.float32))], [TOKENS],
     "c.npz: input 'tokens' is float32 but the model input is int32"),
    ([dataclasses.replace(F_IMAGE, name=UNNAMED)], [IMAGE, TOKENS],
     "c.npz: holds one unnamed array, but the model has 2 inputs (image, tokens); key the data by input name (an "
     ".npz) or set input:"),
])
def test_signature_checks_report_every_problem(fields: list[Field], inputs: list[TensorSpec], message: str) -> None:
    with pytest.raises(DataError) as err:
        match_fields(fields, inputs, "c.npz")
    assert str(err.value) == message


def test_float64_and_int64_are_cast_and_noted() -> None:
    mapping, notes = match_fields([dataclasses.replace(F_IMAGE, dtype=np.dtype(np.float64)),
                                   Field("tokens", (7,), np.dtype(np.int64))], [IMAGE, TOKENS], "c.npz")
    assert sorted(mapping) == ["image", "tokens"]
    assert notes == ["input 'image': float64 data cast to float32", "input 'tokens': int64 data cast to int32"]


def test_evaluation_labels_are_not_inputs() -> None:
    mapping, _ = match_fields([F_IMAGE, Field("label", (), np.dtype(np.int64))], [IMAGE], "e.npz",
                              ignore=["label"])
    assert list(mapping) == ["image"]


# -- the sample set ------------------------------------------------------------------------------------

def test_seeded_selection_is_reproducible_hashed_and_spooled(tmp_path: Path) -> None:
    images = rng_images(50)
    np.savez(tmp_path / "c.npz", image=images)
    a = spool("npz", cfg("c.npz"), [IMAGE], tmp_path, 12, seed=3)
    b = spool("npz", cfg("c.npz"), [IMAGE], tmp_path, 12, seed=3)
    c = spool("npz", cfg("c.npz"), [IMAGE], tmp_path, 12, seed=4)
    assert a.indices == b.indices and a.sha256 == b.sha256
    assert a.indices != c.indices and a.sha256 != c.sha256
    assert list(a.indices) == sorted(set(a.indices)) and a.count == 12 and a.available == 50
    batches = list(a.batches(4))
    assert [batch["image"].shape for batch in batches] == [(4, 6, 5, 2)] * 3
    np.testing.assert_array_equal(np.concatenate([x["image"] for x in batches]), images[list(a.indices)])
    assert len(list(a.batches(4, limit=8))) == 2
    assert a.stats["image"]["min"] == pytest.approx(float(images[list(a.indices)].min()))


def test_nan_names_the_sample_and_more_samples_than_the_data_holds_uses_all(tmp_path: Path) -> None:
    images = rng_images(30)
    images[[3, 17]] = np.nan
    np.savez(tmp_path / "c.npz", image=images)
    with pytest.raises(DataError) as err:
        spool("npz", cfg("c.npz"), [IMAGE], tmp_path, None)
    assert str(err.value) == ("c.npz: NaN or Inf in 2 sample(s) of the calibration data: c.npz sample 3 ('image'), "
                              "c.npz sample 17 ('image')")
    images[[3, 17]] = 0.5
    np.savez(tmp_path / "c.npz", image=images)
    for asked, used in ((29, 29), (30, 30), (31, 30)):  # just inside, at and just outside what the data holds
        got = spool("npz", cfg("c.npz"), [IMAGE], tmp_path, asked)
        assert len(got.indices) == used
        assert list(got.notes) == ([] if asked <= 30 else [
            "calibration.samples is 31 but the data holds 30 samples: all 30 are used"])


# -- CSV ----------------------------------------------------------------------------------------------

def write_csv(path: Path, rows: int, offset: int = 0) -> None:
    lines = ["t, ax,ay,az,temp"] + [f"{i},{i + offset}.0,{2 * (i + offset)},{-(i + offset)},20.5" for i in range(rows)]
    path.write_text("\n".join(lines) + "\n")


def test_csv_windows_with_stride_never_cross_files(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    write_csv(tmp_path / "runs" / "a.csv", 10)
    write_csv(tmp_path / "runs" / "b.csv", 5, offset=100)
    config = cfg("runs", source="csv", columns={"imu": ("ax", "ay", "az")}, window=4, stride=2)
    rows = read_all("csv", config, [SENSOR])
    assert len(rows) == 4 + 1  # a.csv: starts 0, 2, 4, 6; b.csv: start 0
    np.testing.assert_array_equal(rows[1]["imu"][:, 0], [2, 3, 4, 5])
    np.testing.assert_array_equal(rows[4]["imu"][0], [100, 200, -100])
    reader = SOURCES["csv"]().open(config, [SENSOR], tmp_path)
    assert reader.where(1) == "runs/a.csv:4-7" and reader.where(4) == "runs/b.csv:2-5"
    assert resolve_source(cfg("runs")) == "csv"


def test_csv_rows_as_samples(tmp_path: Path) -> None:
    write_csv(tmp_path / "t.csv", 6)
    rows = read_all("csv", cfg("t.csv", columns={"feat": ("temp", "ax")}), [TensorSpec("feat", "f:0", (1, 2),
                                                                                      "float32")])
    np.testing.assert_array_equal(rows[5]["feat"], [20.5, 5.0])


@pytest.mark.parametrize(("content", "columns", "message"), [
    ("t,ax\n0,1\n1,oops\n", {"imu": ("ax",)}, "t.csv:3: column 'ax': 'oops' is not a number"),
    ("t,ax\n0,1\n", {"imu": ("axx",)}, "t.csv: no column 'axx' (columns: t, ax); did you mean 'ax'?"),
    ("", {"imu": ("ax",)}, "t.csv: empty file (a header row naming the columns is needed)"),
])
def test_csv_mistakes(tmp_path: Path, content: str, columns: dict[str, tuple[str, ...]], message: str) -> None:
    (tmp_path / "t.csv").write_text(content)
    with pytest.raises(DataError) as err:
        read_all("csv", cfg("t.csv", columns=columns), [TensorSpec("imu", "imu:0", (1, 1), "float32")])
    assert str(err.value) == message


# -- image folders --------------------------------------------------------------------------------------

def write_image(path: Path, height: int, width: int, mode: str = "RGB", fill: Any = None) -> np.ndarray:
    from PIL import Image

    rng = np.random.default_rng(height * width)
    shape = (height, width, 3) if mode == "RGB" else (height, width)
    pixels = rng.integers(0, 256, size=shape, dtype=np.uint8) if fill is None else np.full(shape, fill, np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels, mode).save(path)
    return pixels


PHOTO = TensorSpec("photo", "photo:0", (1, 8, 6, 3), "float32")


def test_image_folder_is_searched_recursively_and_scaled(tmp_path: Path) -> None:
    a = write_image(tmp_path / "photos" / "a.png", 8, 6)
    write_image(tmp_path / "photos" / "sub" / "b.bmp", 16, 12)
    (tmp_path / "photos" / "notes.txt").write_text("not an image")
    config = cfg("photos", preprocess=Preprocess(scale=1 / 255))
    rows = read_all("images", config, [PHOTO])
    assert len(rows) == 2 and rows[0]["photo"].shape == (8, 6, 3) and rows[0]["photo"].dtype == np.float32
    np.testing.assert_allclose(rows[0]["photo"], a / 255, atol=1e-6)  # already the model's size: no resampling
    reader = SOURCES["images"]().open(config, [PHOTO], tmp_path)
    assert reader.where(1) == "photos/sub/b.bmp" and resolve_source(config) == "images"


@pytest.mark.parametrize(("pre", "shape", "check"), [
    (Preprocess(scale=1.0, color=ColorOrder.BGR), (8, 6, 3), lambda x, src: np.array_equal(x, src[:, :, ::-1])),
    (Preprocess(scale=1.0, layout=Layout.NCHW), (3, 8, 6), lambda x, src: np.array_equal(x, src.transpose(2, 0, 1))),
    (Preprocess(mean=(127.5,), std=(127.5,)), (8, 6, 3), lambda x, src: np.allclose(x, src / 127.5 - 1, atol=1e-6)),
    (Preprocess(scale=1.0, color=ColorOrder.GRAYSCALE), (8, 6, 1), lambda x, src: x.shape == (8, 6, 1)),
])
def test_image_preprocessing(tmp_path: Path, pre: Preprocess, shape: tuple[int, ...], check: Any) -> None:
    src = write_image(tmp_path / "p" / "x.png", 8, 6)
    spec = TensorSpec("photo", "photo:0", (1, *shape), "float32")
    x = read_all("images", cfg("p", preprocess=pre), [spec])[0]["photo"]
    assert x.shape == shape and check(x, src.astype(np.float32))


@pytest.mark.parametrize("color", [ColorOrder.GRAYSCALE, ColorOrder.RGB])
def test_a_16_bit_grayscale_png_keeps_its_high_byte(tmp_path: Path, color: ColorOrder) -> None:
    """Pillow opens a 16-bit grayscale PNG as I;16, and its convert() clipped every value above 255: a
    16-bit photo came out nearly all white. Its high byte is what TF's decode_png keeps (the integration test
    of image folders compares with it)."""
    from PIL import Image

    ramp = (np.arange(8 * 6, dtype=np.uint16) * 1365 + 7).reshape(8, 6)  # 7 .. 64,162: every high byte 0-250
    (tmp_path / "p").mkdir()
    Image.fromarray(ramp).save(tmp_path / "p" / "deep.png")
    assert Image.open(tmp_path / "p" / "deep.png").mode == "I;16"
    channels = 1 if color is ColorOrder.GRAYSCALE else 3
    spec = TensorSpec("photo", "photo:0", (1, 8, 6, channels), "float32")
    x = read_all("images", cfg("p", preprocess=Preprocess(scale=1.0, color=color)), [spec])[0]["photo"]
    np.testing.assert_array_equal(x, np.repeat((ramp >> 8)[:, :, None], channels, -1).astype(np.float32))


@pytest.mark.parametrize(("fit", "row", "column"), [
    # A white 4x12 image into 8x6: crop scales it to 8x24 and keeps the middle (all white);
    # pad scales it to 2x6 and pads rows above and below with black.
    (Fit.CROP, [255] * 8, [255] * 6),
    (Fit.PAD, [0, 0, 0, 255, 255, 0, 0, 0], [255] * 6),
    (Fit.STRETCH, [255] * 8, [255] * 6),
])
def test_fit_keeps_the_aspect_ratio_by_crop_or_pad(tmp_path: Path, fit: Fit, row: list[int],
                                                  column: list[int]) -> None:
    write_image(tmp_path / "p" / "wide.png", 4, 12, fill=255)
    x = read_all("images", cfg("p", preprocess=Preprocess(scale=1.0, fit=fit)), [PHOTO])[0]["photo"]
    np.testing.assert_array_equal(x[:, 3, 0], row)
    np.testing.assert_array_equal(x[4, :, 0], column)


def test_image_mistakes(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"^empty/: holds no images \(.jpg, .jpeg, .png, .bmp, searched "):
        SOURCES["images"]().open(cfg("empty", preprocess=Preprocess(scale=1.0)), [PHOTO], tmp_path)
    write_image(tmp_path / "p" / "a.png", 8, 6)
    (tmp_path / "p" / "broken.jpg").write_bytes(b"\xff\xd8 not really a jpeg")
    with pytest.raises(DataError, match=r"^p/broken\.jpg: cannot read the image \(cannot identify image file"):
        read_all("images", cfg("p", preprocess=Preprocess(scale=1.0)), [PHOTO])
    with pytest.raises(DataError) as err:
        SOURCES["images"]().open(cfg("p", preprocess=Preprocess(scale=1.0)), [PHOTO, TOKENS], tmp_path)
    assert str(err.value) == ("p/: the model has 2 inputs (photo, tokens); set input: to the one this data feeds")
    with pytest.raises(DataError) as err:
        SOURCES["images"]().open(cfg("p", input="phot", preprocess=Preprocess(scale=1.0)), [PHOTO], tmp_path)
    assert str(err.value) == "p/: input: 'phot' is not a model input (inputs: photo); did you mean 'photo'?"


# -- Python functions --------------------------------------------------------------------------------

def test_python_source_needs_trust_and_a_deterministic_function(tmp_path: Path) -> None:
    (tmp_path / "gen_data.py").write_text(textwrap.dedent("""
        import numpy as np
        CALLS = []

        def samples():
            rng = np.random.default_rng(0)
            return [{"image": rng.random((6, 5, 2), dtype=np.float32)} for _ in range(12)]

        def flaky():
            CALLS.append(1)
            return ({"image": np.zeros((6, 5, 2), np.float32)} for _ in range(10 + len(CALLS)))

        def not_dicts():
            return [np.zeros(3)]
    """))
    with pytest.raises(DataError) as err:
        SOURCES["python"]().open(cfg(function="gen_data:samples"), [IMAGE], tmp_path)
    assert str(err.value) == ("function: runs Python code from the pipeline's folder (gen_data:samples), which "
                              "edgeconv does not do unless the pipeline says so: set trust_code: true if you trust "
                              "that code")
    rows = read_all("python", cfg(function="gen_data:samples", trust_code=True), [IMAGE])
    assert len(rows) == 12 and rows[11]["image"].shape == (6, 5, 2)
    with pytest.raises(DataError, match=r"returned 12 samples on the second call and 11 on the first; it must"):
        read_all("python", cfg(function="gen_data:flaky", trust_code=True), [IMAGE])
    with pytest.raises(DataError, match=r"^gen_data:not_dicts: sample 0 is a ndarray, expected a dict"):
        SOURCES["python"]().open(cfg(function="gen_data:not_dicts", trust_code=True), [IMAGE], tmp_path).fields()


# -- statistics and warnings ------------------------------------------------------------------------------

def test_statistics_tell_real_images_from_noise() -> None:
    yy, xx = np.mgrid[0:16, 0:16]
    smooth, noise = Stats((16, 16, 1)), Stats((16, 16, 1))
    rng = np.random.default_rng(0)
    for k in range(20):
        smooth.update(np.sin((xx + yy + k) / 4.0)[:, :, None])
        noise.update(rng.uniform(0, 1, (16, 16, 1)))
    assert smooth.result()["neighbour_correlation"] > 0.9
    assert abs(noise.result()["neighbour_correlation"]) < 0.1
    assert noise.result()["per_channel"]["max"][0] <= 1.0


@pytest.mark.parametrize("shape", [(24, 20, 1), (24, 20, 3), (20, 24, 4), (9, 30, 5), (7, 40), (40,)],
                         ids=["gray", "rgb", "rgba", "five-channels", "2-d", "1-d"])
def test_statistics_are_numpys_over_every_sample(shape: tuple[int, ...]) -> None:
    """Each statistic against NumPy over all samples stacked: ranges exact, means and standard deviations
    within 1e-12 (the per-channel sums run over each channel as one contiguous row), the neighbour
    correlation the mean of each sample's along its first long axis."""
    rng = np.random.default_rng(7)
    samples = [(rng.normal(3.0, 2.0, shape) + np.linspace(0, 9, shape[0]).reshape(-1, *[1] * (len(shape) - 1))
                ).astype(np.float32) for _ in range(6)]
    stats = Stats(shape)
    for x in samples:
        stats.update(x)
    got = stats.result()
    every = np.stack(samples).astype(np.float64)
    assert (got["min"], got["max"]) == (float(every.min()), float(every.max()))
    assert got["mean"] == pytest.approx(every.mean(), rel=1e-12)
    assert got["std"] == pytest.approx(every.std(), rel=1e-12)
    if len(shape) == 3 and shape[-1] <= 4:
        flat = every.reshape(-1, shape[-1])
        assert got["per_channel"]["min"] == flat.min(0).tolist()
        assert got["per_channel"]["max"] == flat.max(0).tolist()
        assert got["per_channel"]["mean"] == pytest.approx(flat.mean(0).tolist(), rel=1e-12)
        assert got["per_channel"]["std"] == pytest.approx(flat.std(0).tolist(), rel=1e-12)
    else:
        assert "per_channel" not in got
    axis = 0 if len(shape) >= 2 and shape[0] >= 8 else (1 if len(shape) >= 3 and shape[1] >= 8 else None)
    if axis is None:
        assert "neighbour_correlation" not in got
    else:
        n = shape[axis]
        corr = [np.corrcoef(np.take(x.astype(np.float64), range(n - 1), axis=axis).ravel(),
                            np.take(x.astype(np.float64), range(1, n), axis=axis).ravel())[0, 1] for x in samples]
        assert got["neighbour_correlation"] == pytest.approx(float(np.mean(corr)), rel=1e-12)


def sample_set(stats: dict[str, dict[str, Any]], count: int = 200) -> SampleSet:
    return SampleSet("calibration", "npz", "c.npz", (), count, 0, tuple(range(count)), (IMAGE,), Path("."), "0" * 64,
                     stats)


def image_stats(lo: float, hi: float, corr: float = 0.9, constant: bool = False) -> dict[str, dict[str, Any]]:
    return {"image": {"min": lo, "max": hi, "mean": (lo + hi) / 2, "std": 0.1, "constant": constant,
                      "neighbour_correlation": corr}}


@pytest.mark.parametrize(("calib", "evaluation", "expected", "checks"), [
    (image_stats(0, 1), image_stats(0, 1), {}, []),
    (image_stats(0, 255), image_stats(0, 1), {}, ["range_mismatch"]),
    (image_stats(0, 0.25, corr=0.01), image_stats(0, 1), {}, ["noise", "range_mismatch"]),
    (image_stats(0, 255), None, {"image": (0.0, 1.0)}, ["expected_range"]),
    (image_stats(0.5, 0.5, constant=True), None, {}, ["constant"]),
])
def test_data_warnings(calib: dict[str, Any], evaluation: dict[str, Any] | None,
                       expected: dict[str, tuple[float, float]], checks: list[str]) -> None:
    warnings = data_warnings(sample_set(calib), min_samples=100,
                             evaluation=sample_set(evaluation) if evaluation else None, expected=expected)
    assert [w.check for w in warnings] == checks


def test_warning_texts() -> None:
    (wide,) = data_warnings(sample_set(image_stats(0, 255)), min_samples=100,
                            evaluation=sample_set(image_stats(0, 1)), expected={})
    assert wide.message == ("input 'image': calibration range [0, 255] is 255x wider than the evaluation range "
                            "[0, 1]; INT8 would spend most of its 256 levels on values that never occur (wrong "
                            "preprocessing, e.g. 0-255 instead of 0-1?)")
    (few,) = data_warnings(sample_set(image_stats(0, 1), count=40), min_samples=100, evaluation=None, expected={})
    assert few.message == ("calibration uses 40 samples, fewer than calibration.min_samples (100); quantization "
                           "ranges may miss real inputs")


# Each threshold of the calibration findings just inside, at and just outside (exact binary fractions):
# covers < 0.5 (a warning), < 0.25 (severe), wider > 4x (severe), lag-1 correlation < 0.2 (noise), fewer
# samples than calibration.min_samples.
@pytest.mark.parametrize(("calib", "count", "found"), [
    (image_stats(0, 0.5 + 2**-20), 200, []),  # covers just over half of [0, 1]
    (image_stats(0, 0.5), 200, []),  # exactly half
    (image_stats(0, 0.5 - 2**-20), 200, [("range_mismatch", False)]),
    (image_stats(0, 0.25 + 2**-20), 200, [("range_mismatch", False)]),
    (image_stats(0, 0.25), 200, [("range_mismatch", False)]),  # a quarter is not yet severe
    (image_stats(0, 0.25 - 2**-20), 200, [("range_mismatch", True)]),
    (image_stats(-1.5, 2.5 - 2**-20), 200, []),  # just under 4x as wide
    (image_stats(-1.5, 2.5), 200, []),  # exactly 4x
    (image_stats(-1.5, 2.5 + 2**-20), 200, [("range_mismatch", True)]),
    (image_stats(0, 1, corr=0.2 + 2**-20), 200, []),
    (image_stats(0, 1, corr=0.2), 200, []),
    (image_stats(0, 1, corr=0.2 - 2**-20), 200, [("noise", True)]),
    (image_stats(0, 1), 101, []),
    (image_stats(0, 1), 100, []),  # exactly calibration.min_samples
    (image_stats(0, 1), 99, [("min_samples", False)]),
])
def test_data_findings_at_their_thresholds(calib: dict[str, Any], count: int, found: list[tuple[str, bool]]) -> None:
    warnings = data_warnings(sample_set(calib, count=count), min_samples=100,
                             evaluation=sample_set(image_stats(0, 1)), expected={})
    assert [(w.check, w.severe) for w in warnings] == found


@pytest.mark.parametrize(("held", "refused"), [(9, True), (10, False), (11, False)])
def test_calibration_data_below_the_hard_floor_is_refused(tmp_path: Path, held: int, refused: bool) -> None:
    """All of the data is used when calibration.samples asks for more, but never fewer than 10 samples."""
    np.savez(tmp_path / "c.npz", image=rng_images(held))
    reader = SOURCES["npz"]().open(cfg("c.npz"), [IMAGE], Path.cwd())
    if refused:
        with pytest.raises(DataError, match=r"^c.npz: the calibration data holds 9 sample\(s\); at least 10 are "
                                            r"needed$"):
            collect(reader, [IMAGE], role="calibration", source="npz", samples=200, seed=0, folder=tmp_path,
                    at_least=10)
    else:
        got = collect(reader, [IMAGE], role="calibration", source="npz", samples=200, seed=0, folder=tmp_path,
                      at_least=10)
        assert len(got.indices) == held
