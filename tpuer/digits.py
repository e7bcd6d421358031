"""The networks of the demos: scikit-learn's bundled handwritten digits (8 x 8 pixels, 0..16),
an MLP trained with scikit-learn and a small CNN trained here in NumPy, both as float layers
ready for :func:`tpuer.quantize`. Everything is seeded, so a run is repeatable."""

import warnings
from dataclasses import dataclass

import numpy as np

from .quantize import Conv2D, Dense, float_forward, im2col

__all__ = ["Digits", "load_digits", "train_mlp", "train_cnn", "float_forward"]


@dataclass
class Digits:
    """Train and test splits: ``x`` float in [0, 1], ``y`` the labels."""
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray

    def images(self, x):
        """Samples as NHWC images (n, 8, 8, 1)."""
        return x.reshape(len(x), 8, 8, 1)


def load_digits(test_size=0.2, seed=0):
    from sklearn.datasets import load_digits as sklearn_digits
    from sklearn.model_selection import train_test_split
    x, y = sklearn_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(
        x / 16.0, y, test_size=test_size, random_state=seed, stratify=y)
    return Digits(x_train, y_train, x_test, y_test)


def train_mlp(digits, hidden=(32,), seed=0):
    """A scikit-learn ``MLPClassifier`` (ReLU) on the digits; returns its float layers."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf = MLPClassifier(hidden_layer_sizes=hidden, max_iter=300, random_state=seed)
        clf.fit(digits.x_train, digits.y_train)
    pairs = list(zip(clf.coefs_, clf.intercepts_))
    return [Dense(w, b, relu=i < len(pairs) - 1) for i, (w, b) in enumerate(pairs)]


def train_cnn(digits, channels=8, epochs=40, seed=0, learning_rate=0.05):
    """A small CNN: 3x3 convolution (1 -> ``channels``, stride 2, padding 1) and ReLU, then
    a dense layer to the 10 classes; trained with mini-batch SGD with momentum on softmax
    cross-entropy. Returns its float layers."""
    rng = np.random.default_rng(seed)
    x = digits.images(digits.x_train)
    y = digits.y_train
    n = len(x)
    rows = im2col(x, (3, 3), 2, 1, 0.0)                     # (n * 16, 9)
    positions = rows.shape[0] // n
    wc = rng.normal(0, np.sqrt(2 / 9), (9, channels))
    bc = np.zeros(channels)
    wd = rng.normal(0, np.sqrt(2 / (positions * channels)), (positions * channels, 10))
    bd = np.zeros(10)
    params = [wc, bc, wd, bd]
    velocity = [np.zeros_like(p) for p in params]
    rows = rows.reshape(n, positions, 9)
    for _ in range(epochs):
        order = rng.permutation(n)
        for start in range(0, n, 32):
            batch = order[start:start + 32]
            p = rows[batch]                                   # (b, 16, 9)
            pre = p @ wc + bc                                 # (b, 16, c)
            hidden = np.maximum(pre, 0).reshape(len(batch), -1)
            logits = hidden @ wd + bd
            logits -= logits.max(axis=1, keepdims=True)
            prob = np.exp(logits)
            prob /= prob.sum(axis=1, keepdims=True)
            prob[np.arange(len(batch)), y[batch]] -= 1
            d_logits = prob / len(batch)
            d_wd = hidden.T @ d_logits
            d_bd = d_logits.sum(axis=0)
            d_hidden = (d_logits @ wd.T).reshape(pre.shape) * (pre > 0)
            d_wc = np.einsum("bpk,bpc->kc", p, d_hidden)
            d_bc = d_hidden.sum(axis=(0, 1))
            for index, grad in enumerate((d_wc, d_bc, d_wd, d_bd)):
                velocity[index] = 0.9 * velocity[index] - learning_rate * grad
                params[index] += velocity[index]
    return [Conv2D(wc.reshape(3, 3, 1, channels), bc, stride=2, padding=1, relu=True),
            Dense(wd, bd, relu=False)]
