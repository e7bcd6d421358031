"""Make the TFLite models the importer's tests run: small Keras networks with random
weights (seeded), converted by TensorFlow's converter to full-integer int8, one per
group of operators, so that every operator and fused activation tpuer supports is in one
of them.

Needs TensorFlow (``pip install tensorflow-cpu``); the tests themselves need only the
LiteRT interpreter. Run from the repository's root::

    python tools/make_tflite_models.py [--out tests/data/tflite]
"""

import argparse
from pathlib import Path

import numpy as np


def convert(tf, model, input_shape, *, float_io=False, seed=0):
    """``model`` converted to int8 with a representative dataset of normal samples; int8
    input and output unless ``float_io`` (then the model starts with QUANTIZE and ends with
    DEQUANTIZE)."""
    rng = np.random.default_rng(seed)

    def representative():
        for _ in range(100):
            yield [rng.normal(size=(1, *input_shape)).astype(np.float32)]

    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = representative
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    if not float_io:
        converter.inference_input_type = tf.int8
        converter.inference_output_type = tf.int8
    return converter.convert()


def convert_float(tf, model):
    """``model`` converted without quantisation: a float32 model, which tpuer refuses."""
    return tf.lite.TFLiteConverter.from_keras_model(model).convert()


def models(tf):
    """``{name: (keras model, input shape, float_io)}``."""
    layers = tf.keras.layers

    def seeded(seed, *stack):
        tf.keras.utils.set_random_seed(seed)
        model = tf.keras.Sequential(list(stack))
        # Random biases too, so that the folded bias is not 0.
        for layer in model.layers:
            weights = layer.get_weights()
            if len(weights) == 2:
                layer.set_weights([weights[0], np.random.default_rng(seed).normal(
                    scale=0.2, size=weights[1].shape).astype(np.float32)])
        return model

    def clip(x):
        return tf.clip_by_value(x, -1.0, 1.0)

    found = {}
    found["dense"] = (seeded(
        1, tf.keras.Input((20,)), layers.Dense(12, activation="relu"),
        layers.Dense(9, activation="relu6"), layers.Dense(7)), (20,), False)
    found["conv"] = (seeded(
        2, tf.keras.Input((9, 8, 2)),
        layers.Conv2D(6, 3, padding="same", activation="relu"),
        layers.Conv2D(5, 3, strides=2, padding="same", activation="relu6"),
        layers.Conv2D(4, (2, 3), strides=(1, 2), padding="valid"),
        layers.Flatten(), layers.Dense(5)), (9, 8, 2), False)
    found["depthwise"] = (seeded(
        3, tf.keras.Input((8, 8, 3)),
        layers.DepthwiseConv2D(3, padding="same", activation="relu"),
        layers.DepthwiseConv2D(3, strides=2, padding="same", depth_multiplier=2),
        layers.Conv2D(4, 1), layers.Lambda(clip),
        layers.Flatten(), layers.Dense(6)), (8, 8, 3), False)
    found["pool"] = (seeded(
        4, tf.keras.Input((10, 10, 3)), layers.ZeroPadding2D(((1, 0), (2, 1))),
        layers.Conv2D(4, 3, activation="relu"),
        layers.MaxPooling2D(2), layers.AveragePooling2D(2, strides=1, padding="same"),
        layers.MaxPooling2D(3, strides=2, padding="same"),
        layers.GlobalAveragePooling2D(), layers.Dense(3), layers.Softmax()),
        (10, 10, 3), False)

    bias = tf.constant(np.linspace(-0.5, 0.5, 4, dtype=np.float32))
    found["dilated"] = (seeded(
        9, tf.keras.Input((12, 12, 2)),
        layers.Conv2D(4, 3, dilation_rate=2, padding="same", activation="relu"),
        layers.DepthwiseConv2D(3, dilation_rate=2, padding="valid"),
        layers.AveragePooling2D(3, strides=2, padding="valid"),
        layers.Lambda(lambda t: tf.pad(t, [[0, 0], [1, 1], [0, 2], [0, 0]],
                                       constant_values=0.25)),
        layers.Lambda(lambda t: t + bias),
        layers.GlobalAveragePooling2D(keepdims=True),
        layers.Flatten(), layers.Dense(4)), (12, 12, 2), False)

    tf.keras.utils.set_random_seed(5)
    inputs = tf.keras.Input((8, 8, 4))
    trunk = layers.Conv2D(4, 3, padding="same", activation="relu")(inputs)
    branch = layers.Conv2D(4, 3, padding="same")(trunk)
    merged = layers.Add()([trunk, branch])
    pooled = layers.GlobalAveragePooling2D()(merged)
    outputs = layers.Dense(5, activation="softmax")(pooled)
    found["residual"] = (tf.keras.Model(inputs, outputs), (8, 8, 4), False)

    # An operator tpuer does not run (TANH), for the importer's error.
    found["unsupported_tanh"] = (seeded(
        7, tf.keras.Input((6,)), layers.Dense(4, activation="tanh")), (6,), False)
    found["float_io"] = (seeded(
        6, tf.keras.Input((16,)), layers.Dense(8, activation="relu"), layers.Dense(4)),
        (16,), True)
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="tests/data/tflite", type=Path)
    args = parser.parse_args()
    import tensorflow as tf
    args.out.mkdir(parents=True, exist_ok=True)
    found = models(tf)
    tf.keras.utils.set_random_seed(8)
    float_model = tf.keras.Sequential([tf.keras.Input((6,)), tf.keras.layers.Dense(3)])
    (args.out / "unsupported_float.tflite").write_bytes(convert_float(tf, float_model))
    for name, (model, shape, float_io) in found.items():
        data = convert(tf, model, shape, float_io=float_io)
        (args.out / f"{name}.tflite").write_bytes(data)
        print(f"{name}.tflite: {len(data):,} bytes")


if __name__ == "__main__":
    main()
