"""Train the shipped example: a small CNN on scikit-learn's bundled digits (real scans).

Writes examples/digits/{model.keras, calibration.npz, eval.npz}. The outputs are
committed, so `edgeconv build pipeline.yaml` runs without training; rerun this
script only to regenerate them:

    python scripts/make_example.py [--out examples/digits] [--epochs 30]

Data: 1797 8x8 scans with values 0..16 (sklearn.datasets.load_digits), scaled to
[0, 1] and resized to 16x16 with bilinear interpolation. 360 samples (stratified,
seed 0) are held out for evaluation; calibration samples come from the training part.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import numpy as np

SIZE = 16
SEED = 0


def load_digits_16() -> tuple[np.ndarray, np.ndarray]:
    import tensorflow as tf
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    images = (x.reshape(-1, 8, 8, 1) / 16.0).astype(np.float32)
    resized = tf.image.resize(images, (SIZE, SIZE), method="bilinear").numpy()
    return np.clip(resized, 0.0, 1.0).astype(np.float32), y.astype(np.int32)


def make_model():  # type: ignore[no-untyped-def]
    import keras
    from keras import layers

    inp = keras.Input((SIZE, SIZE, 1), name="image")
    x = layers.Conv2D(16, 3, padding="same", use_bias=False, name="conv1")(inp)
    x = layers.BatchNormalization(name="bn1")(x)
    x = layers.ReLU(name="relu1")(x)
    x = layers.MaxPooling2D(name="pool1")(x)
    x = layers.Conv2D(32, 3, padding="same", use_bias=False, name="conv2")(x)
    x = layers.BatchNormalization(name="bn2")(x)
    x = layers.ReLU(name="relu2")(x)
    x = layers.MaxPooling2D(name="pool2")(x)
    x = layers.Dropout(0.25, name="dropout1")(x)
    x = layers.Flatten(name="flatten")(x)
    x = layers.Dense(48, activation="relu", name="fc1")(x)
    x = layers.Dropout(0.4, name="dropout2")(x)
    out = layers.Dense(10, activation="softmax", name="digit")(x)
    return keras.Model(inp, out, name="digits_cnn")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "examples" / "digits")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--calibration-samples", type=int, default=400)
    args = parser.parse_args()

    import keras
    from sklearn.model_selection import train_test_split

    keras.utils.set_random_seed(SEED)
    images, labels = load_digits_16()
    x_train, x_eval, y_train, y_eval = train_test_split(images, labels, test_size=360, stratify=labels,
                                                        random_state=SEED)
    model = make_model()
    model.compile(optimizer=keras.optimizers.Adam(2e-3), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    model.fit(x_train, y_train, epochs=args.epochs, batch_size=32, validation_split=0.1, verbose=2)
    _, accuracy = model.evaluate(x_eval, y_eval, verbose=0)
    print(f"float accuracy on the {len(y_eval)} held-out digits: {accuracy:.4f}")

    args.out.mkdir(parents=True, exist_ok=True)
    # Ship the inference model only: an uncompiled copy carries no optimizer state.
    shipped = keras.Model.from_config(model.get_config())
    shipped.set_weights(model.get_weights())
    shipped.save(args.out / "model.keras")
    rng = np.random.default_rng(SEED)
    pick = rng.choice(len(x_train), size=args.calibration_samples, replace=False)
    np.savez_compressed(args.out / "calibration.npz", image=x_train[pick])
    np.savez_compressed(args.out / "eval.npz", image=x_eval, label=y_eval)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
