"""Synthetic stand-ins for ``keras.datasets.*.load_data``: the real shapes and dtypes, and labels
a model can learn (each class has its own template), so a capped run means something offline."""

from __future__ import annotations

import numpy as np

# name: (train count, test count, sample shape, classes, label shape suffix)
IMAGES = {
    "mnist": (60000, 10000, (28, 28), 10, ()),
    "fashion_mnist": (60000, 10000, (28, 28), 10, ()),
    "cifar10": (50000, 10000, (32, 32, 3), 10, (1,)),
    "cifar100": (50000, 10000, (32, 32, 3), 100, (1,)),
}
SEQUENCES = {"imdb": (25000, 25000, 2), "reuters": (8982, 2246, 46)}
REGRESSION = {"boston_housing": (404, 102, 13), "california_housing": (16512, 4128, 8)}
DATASETS = (*IMAGES, *SEQUENCES, *REGRESSION)


def _images(rng, count, shape, classes, label_shape, templates):
    labels = rng.integers(0, classes, size=count).astype(np.uint8)
    noise = rng.integers(0, 64, size=(count, *shape), dtype=np.uint8)
    return noise + templates[labels], labels.reshape(count, *label_shape)


def _sequences(rng, count, classes, num_words):
    labels = rng.integers(0, classes, size=count)
    vocabulary = max(num_words or 10000, classes + 4)
    lengths = rng.integers(20, 200, size=count)
    tokens = rng.integers(4, vocabulary, size=int(lengths.sum()))
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    tokens[starts] = labels + 4  # the class token opens every sequence of that class
    seqs = [[1] + chunk.tolist() for chunk in np.split(tokens, starts[1:])]
    x = np.empty(count, dtype=object)
    x[:] = seqs
    return x, labels.astype(np.int64)


def load(name: str, seed: int, **kwargs):
    """((x_train, y_train), (x_test, y_test)) shaped like the real dataset ``name``."""
    rng = np.random.default_rng(seed)
    if name in IMAGES:
        train, test, shape, classes, label_shape = IMAGES[name]
        if name == "cifar100" and kwargs.get("label_mode") == "coarse":
            classes = 20
        templates = rng.integers(0, 192, size=(classes, *shape), dtype=np.uint8)
        return (
            _images(rng, train, shape, classes, label_shape, templates),
            _images(rng, test, shape, classes, label_shape, templates),
        )
    if name in SEQUENCES:
        train, test, classes = SEQUENCES[name]
        words = kwargs.get("num_words")
        return _sequences(rng, train, classes, words), _sequences(rng, test, classes, words)
    train, test, features = REGRESSION[name]
    weights = rng.normal(size=features)

    def split(count):
        x = rng.normal(size=(count, features)).astype(np.float64 if name == "boston_housing" else np.float32)
        return x, (x @ weights + 20.0).astype(x.dtype)

    return split(train), split(test)
