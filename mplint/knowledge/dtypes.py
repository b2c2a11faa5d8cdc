"""How the frameworks spell the floating-point dtypes: the names rules, analyses, project facts and the runtime
companion compare against (``tf.float16``, ``np.half``, ``torch.double``, ``"float64"``...)."""

from __future__ import annotations

# float16's names in NumPy, TensorFlow and torch (``np.half``, ``torch.half``).
FLOAT16_NAMES = frozenset({"float16", "half"})
# ...and NumPy's type code, as a string (``astype("f2")``).
FLOAT16_SPELLINGS = FLOAT16_NAMES | {"f2"}
REDUCED_DTYPES = frozenset({"float16", "bfloat16"})
# The Keras/TensorFlow/NumPy dtype names float16 is not: a value or policy of one of these keeps full precision.
WIDE_DTYPES = frozenset({"float32", "float64"})
# ...with NumPy's other names and type codes.
WIDE_SPELLINGS = WIDE_DTYPES | {"double", "single", "f4", "f8"}
# torch's full-precision dtypes (``torch.float`` is float32, ``torch.double`` float64).
TORCH_WIDE_NAMES = frozenset({"float32", "float", "float64", "double"})
