from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgeconv import DataError
from edgeconv.calibration import SOURCES
from edgeconv.calibration.checks import check_file_arrays, match_signature, select
from edgeconv.calibration.sources import UNNAMED
from edgeconv.ir import TensorSpec

IMAGE = TensorSpec("image", "image:0", (1, 6, 5, 2), "float32")
TOKENS = TensorSpec("tokens", "tokens:0", (1, 7), "int32")


@pytest.fixture(autouse=True)
def _cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def rng_images(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((n, 6, 5, 2), dtype=np.float32)


def test_npz_and_npy_sources(tmp_path: Path) -> None:
    np.savez(tmp_path / "c.npz", image=rng_images(9), tokens=np.ones((9, 7), np.int32))
    np.save(tmp_path / "c.npy", rng_images(4))
    arrays = SOURCES["npz"]().read(tmp_path / "c.npz")
    assert sorted(arrays) == ["image", "tokens"] and arrays["image"].shape == (9, 6, 5, 2)
    single = SOURCES["npy"]().read(tmp_path / "c.npy")
    assert list(single) == [UNNAMED]
    keyed, notes = match_signature(single, [IMAGE], tmp_path / "c.npy")
    assert list(keyed) == ["image"] and notes == []


@pytest.mark.parametrize(("source", "content", "message"), [
    ("npz", b"not a zip", "c.npz: not a readable .npz archive"),
    ("npy", b"\x93NUMPY garbage", "c.npz: not a readable .npy array"),
])
def test_unreadable_files(tmp_path: Path, source: str, content: bytes, message: str) -> None:
    (tmp_path / "c.npz").write_bytes(content)
    with pytest.raises(DataError, match=f"^{message}"):
        SOURCES[source]().read(Path("c.npz"))


def test_object_arrays_are_refused(tmp_path: Path) -> None:
    np.savez(tmp_path / "c.npz", image=np.array([{"a": 1}], dtype=object))
    with pytest.raises(DataError, match=r"^c\.npz: cannot read arrays .*save plain numeric arrays"):
        SOURCES["npz"]().read(Path("c.npz"))


@pytest.mark.parametrize(("arrays", "message"), [
    ({"image": np.full((5, 6, 5, 2), np.nan, np.float32)},
     "c.npz: array 'image' has NaN or Inf in 5 sample(s): index 0, 1, 2, 3, 4"),
    ({"image": np.concatenate([rng_images(9), np.full((3, 6, 5, 2), np.inf, np.float32)])},
     "c.npz: array 'image' has NaN or Inf in 3 sample(s): index 9, 10, 11"),
    ({"image": np.where(np.arange(12 * 60).reshape(12, 6, 5, 2) % 97 == 0, np.nan, 0.5)},
     "c.npz: array 'image' has NaN or Inf in 8 sample(s): index 0, 1, 3, 4, 6, ..."),
    ({"image": rng_images(4), "tokens": np.ones((3, 7), np.int32)},
     "c.npz: inputs have different sample counts: 'image': 4, 'tokens': 3"),
    ({"image": np.zeros((0, 6, 5, 2), np.float32)},
     "c.npz: array 'image' holds no samples (shape (0, 6, 5, 2)); the first axis counts samples"),
    ({"image": np.array(["a", "b"])}, "c.npz: array 'image' has dtype <U1, expected numbers"),
    ({}, "c.npz: holds no arrays"),
])
def test_file_checks(arrays: dict[str, np.ndarray], message: str) -> None:
    with pytest.raises(DataError) as info:
        check_file_arrays(arrays, Path("c.npz"))
    assert str(info.value) == message


@pytest.mark.parametrize(("arrays", "inputs", "message"), [
    ({"imgae": rng_images(3)}, [IMAGE],
     "c.npz: array 'imgae' is not a model input (inputs: image); did you mean 'image'?\n"
     "c.npz: no array for model input 'image' (arrays: imgae); did you mean 'imgae'?"),
    ({"image": rng_images(3), "label": np.zeros(3)}, [IMAGE],
     "c.npz: array 'label' is not a model input (inputs: image)"),
    ({"image": np.zeros((3, 5, 6, 2), np.float32)}, [IMAGE],
     "c.npz: input 'image' has samples of shape (5, 6, 2), the model expects (6, 5, 2) (array shape (N, 6, 5, 2) "
     "for model input shape (1, 6, 5, 2))"),
    ({"image": np.zeros((3, 1, 6, 5, 2), np.float32)}, [IMAGE],
     "c.npz: input 'image' has samples of shape (1, 6, 5, 2), the model expects (6, 5, 2) (array shape (N, 6, 5, 2) "
     "for model input shape (1, 6, 5, 2))"),
    ({"image": np.zeros((3, 6, 5, 2), np.uint8)}, [IMAGE],
     "c.npz: input 'image' is uint8 but the model input is float32: apply the model's preprocessing (e.g. scale to "
     "the range it was trained on) and save float data"),
    ({"tokens": np.zeros((3, 7), np.int64)}, [TOKENS], "c.npz: input 'tokens' is int64 but the model input is int32"),
    ({UNNAMED: rng_images(3)}, [IMAGE, TOKENS],
     "c.npz: an .npy file holds one array, but the model has 2 inputs (image, tokens); use an .npz keyed by input "
     "name"),
])
def test_signature_checks(arrays: dict[str, np.ndarray], inputs: list[TensorSpec], message: str) -> None:
    with pytest.raises(DataError) as info:
        match_signature(arrays, inputs, Path("c.npz"))
    assert str(info.value) == message


def test_float64_is_cast_and_noted() -> None:
    keyed, notes = match_signature({"image": rng_images(3).astype(np.float64)}, [IMAGE], Path("c.npz"))
    assert keyed["image"].dtype == np.float32
    assert notes == ["input 'image': float64 data cast to float32"]


def test_seeded_selection_is_reproducible_and_hashed(tmp_path: Path) -> None:
    path = tmp_path / "c.npz"
    np.savez(path, image=rng_images(50))
    arrays = {"image": rng_images(50)}
    a = select(arrays, samples=12, seed=3, source="npz", path=path)
    b = select(arrays, samples=12, seed=3, source="npz", path=path)
    c = select(arrays, samples=12, seed=4, source="npz", path=path)
    assert a.indices == b.indices and a.sha256() == b.sha256()
    assert a.indices != c.indices and a.sha256() != c.sha256()
    assert len(set(a.indices)) == 12 and a.count == 12 and a.available == 50
    np.testing.assert_array_equal(a.arrays["image"][0], arrays["image"][a.indices[0]])
    assert [batch["image"].shape for batch in a.batches(4)] == [(4, 6, 5, 2)] * 3


def test_asking_for_more_samples_than_the_file_has(tmp_path: Path) -> None:
    path = tmp_path / "c.npz"
    path.write_bytes(b"x")
    with pytest.raises(DataError) as info:
        select({"image": rng_images(30)}, samples=200, seed=0, source="npz", path=Path("c.npz"))
    assert str(info.value) == ("c.npz: calibration.samples is 200 but the file holds 30 samples; set "
                               "calibration.samples to 30 or fewer")
