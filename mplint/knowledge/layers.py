"""Keras layers by what they do to their input."""

from __future__ import annotations

# Layers whose output has the shape of their input: the layer before one is the output layer (and sets the class
# count); the static analysis and the runtime's model checks both look through them.
SHAPE_PRESERVING = frozenset(
    {
        "Activation",
        "Softmax",
        "ReLU",
        "LeakyReLU",
        "PReLU",
        "ELU",
        "ThresholdedReLU",
        "Dropout",
        "SpatialDropout1D",
        "SpatialDropout2D",
        "SpatialDropout3D",
        "GaussianDropout",
        "GaussianNoise",
        "AlphaDropout",
        "ActivityRegularization",
        "Identity",
    }
)
