"""Write tests/data/keras2_savedmodel: a Keras 2 SavedModel (keras_metadata.pb, a compiled and
once-trained model with optimizer slots), the format Keras-2-era projects ship.

Keras 2 is the tf-keras package, which depends on the full ``tensorflow`` wheel; edgeconv's
environment has ``tensorflow-cpu``, so install it without dependencies in a side folder:

    pip install --no-deps --target /tmp/tfk tf-keras~=2.21
    python scripts/make_keras2_savedmodel.py /tmp/tfk

The model: feat (6) -> Dense 5 relu (d1) -> Dropout 0.3 (drop) -> BatchNormalization (bn)
-> Dense 3 (d2), trained one epoch on seeded random data.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "keras2_savedmodel"


def main() -> None:
    sys.path.insert(0, sys.argv[1])
    import numpy as np
    import tf_keras as k

    k.utils.set_random_seed(0)
    inp = k.Input((6,), name="feat")
    x = k.layers.Dense(5, activation="relu", name="d1")(inp)
    x = k.layers.Dropout(0.3, name="drop")(x)
    x = k.layers.BatchNormalization(name="bn")(x)
    model = k.Model(inp, k.layers.Dense(3, name="d2")(x))
    model.compile(optimizer="adam", loss="mse")
    rng = np.random.default_rng(0)
    model.fit(rng.normal(size=(64, 6)), rng.normal(size=(64, 3)), epochs=1, verbose=0)
    model.save(str(OUT), save_format="tf")
    print(f"wrote {OUT} with tf-keras {k.__version__}")


if __name__ == "__main__":
    main()
