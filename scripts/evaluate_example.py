"""Float vs INT8 accuracy of the shipped example on its 360 held-out digits.

    edgeconv build pipeline.yaml && python scripts/evaluate_example.py [build/digits/digits.tflite]

The float model runs in Keras (inference mode); the INT8 model in the LiteRT
interpreter, its inputs quantized with the scale and zero point the .tflite declares.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    tflite = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "build" / "digits" / "digits.tflite"
    import keras
    from ai_edge_litert.interpreter import Interpreter

    data = np.load(ROOT / "examples" / "digits" / "eval.npz")
    images, labels = data["image"], data["label"]
    model = keras.models.load_model(ROOT / "examples" / "digits" / "model.keras")
    float_acc = float(np.mean(model.predict(images, verbose=0).argmax(1) == labels))

    interpreter = Interpreter(model_path=str(tflite))
    runner = interpreter.get_signature_runner()
    scale, zero = interpreter.get_input_details()[0]["quantization"]
    hits = 0
    for image, label in zip(images, labels):
        x = np.clip(np.round(image / scale + zero), -128, 127).astype(np.int8)
        hits += int(runner(image=x[None])["digit"].argmax() == label)
    print(f"float accuracy: {float_acc:.4f}  int8 accuracy: {hits / len(labels):.4f}  ({len(labels)} digits)")


if __name__ == "__main__":
    main()
