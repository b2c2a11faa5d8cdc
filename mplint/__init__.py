"""mplint: find and fix TensorFlow/Keras mixed-precision bugs.

The static half (everything outside ``mplint.runtime`` and ``mplint.verify``)
never imports TensorFlow.
"""

__version__ = "0.1.0"
