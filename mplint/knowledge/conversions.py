"""What converts data to a dtype, and what computes with the result: shared by MP401 (on libcst) and the
project summaries of ``project/extract.py`` (on CPython's tree), which must agree."""

from __future__ import annotations

# TensorFlow path -> position of the dtype argument.
CONVERSIONS = {"cast": 1, "dtypes.cast": 1, "image.convert_image_dtype": 1}
# NumPy/TensorFlow constructors that take the dtype by keyword.
DTYPE_KEYWORD_CONVERSIONS = frozenset({"array", "asarray", "convert_to_tensor"})
# Calls whose arguments are computed with (besides `tf.image.*` and `tf.math.*`).
NP_MATH = frozenset({"clip", "mean", "std", "subtract", "divide", "multiply", "add", "sqrt", "flip", "rot90"})
TF_MATH = frozenset(
    {
        "clip_by_value",
        "add",
        "subtract",
        "multiply",
        "divide",
        "truediv",
        "sqrt",
        "reduce_mean",
        "reduce_std",
        "maximum",
        "minimum",
    }
)
