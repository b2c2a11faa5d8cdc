"""What sets a mixed-precision policy: the one table shared by project facts and rules.

Both readers resolve a call to its canonical API name first (``runner.set_policy(pi)``
in reinforcement-learning code is no Keras call), then ask these functions.
"""

from __future__ import annotations

from mplint.knowledge.apinames import KName
from mplint.knowledge.dtypes import WIDE_DTYPES

MIXED_POLICIES = frozenset({"mixed_float16", "mixed_bfloat16"})
FLOAT16_POLICIES = frozenset({"mixed_float16", "float16"})
BFLOAT16_POLICIES = frozenset({"mixed_bfloat16", "bfloat16"})
REDUCED_POLICIES = FLOAT16_POLICIES | BFLOAT16_POLICIES
# Full precision: no reduced dtype anywhere.
FLOAT32_POLICIES = WIDE_DTYPES
# The policies a user may name (the config's `policy`, `--policy`), in the order help and errors list them.
POLICY_NAMES = ("float32", "float16", "bfloat16", "mixed_float16", "mixed_bfloat16")
UNKNOWN_POLICY = "?"  # set from a value known only at run time: possibly mixed

SETTER_NAMES = frozenset({"set_global_policy", "set_policy", "set_dtype_policy"})
POLICY_CLASS_NAMES = frozenset({"Policy", "DTypePolicy"})
FLOATX_SETTER = "set_floatx"


def is_policy_setter(k: KName | None) -> bool:
    """``keras.mixed_precision.set_global_policy`` and its aliases (tf.keras, tf_keras, experimental)."""
    return k is not None and k.is_keras and k.last in SETTER_NAMES


def is_policy_class(k: KName | None) -> bool:
    return k is not None and k.is_keras and k.last in POLICY_CLASS_NAMES


def is_floatx_setter(k: KName | None) -> bool:
    return k is not None and k.is_keras and k.last == FLOATX_SETTER


def dtype_policy_name(value: str) -> str | None:
    """A string that names a policy or a compute dtype (``"float16"``, ``tf.float16``'s name)."""
    return value if value in REDUCED_POLICIES | FLOAT32_POLICIES else None
