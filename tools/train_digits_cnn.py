"""Train the CNN of ``tpuer demo tflite`` and convert it to a full-integer int8 TFLite model:
Keras on scikit-learn's digits (the demos' split, :func:`tpuer.digits.load_digits`), then
TensorFlow's converter with the training images as its representative dataset. The model
takes float32 images (its first operator a QUANTIZE) and gives float32 class
probabilities (its last a DEQUANTIZE).

Needs TensorFlow (``pip install -e '.[tflite-models]'``). Run from the repository's root::

    python tools/train_digits_cnn.py [--out tpuer/data/digits_cnn.tflite]
"""

import argparse
from pathlib import Path

import numpy as np


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="tpuer/data/digits_cnn.tflite", type=Path)
    parser.add_argument("--epochs", type=int, default=60)
    args = parser.parse_args()
    import tensorflow as tf
    from tpuer.digits import load_digits

    digits = load_digits()
    x_train = digits.images(digits.x_train).astype(np.float32)
    x_test = digits.images(digits.x_test).astype(np.float32)
    tf.keras.utils.set_random_seed(2026)
    layers = tf.keras.layers
    model = tf.keras.Sequential([
        tf.keras.Input((8, 8, 1)),
        layers.Conv2D(8, 3, padding="same", activation="relu"),
        layers.Conv2D(16, 3, strides=2, padding="same", activation="relu"),
        layers.Flatten(),
        layers.Dense(10),
        layers.Softmax(),
    ])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.003),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x_train, digits.y_train, epochs=args.epochs, batch_size=32, verbose=0)
    _, accuracy = model.evaluate(x_test, digits.y_test, verbose=0)
    print(f"float accuracy on the test split: {accuracy:.2%}")

    def representative():
        for image in x_train[:500]:
            yield [image[None]]

    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = representative
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    data = converter.convert()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(data)
    print(f"{args.out}: {len(data):,} bytes")


if __name__ == "__main__":
    main()
