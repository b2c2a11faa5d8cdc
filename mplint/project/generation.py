"""The Keras generation a program targets: G1 (TF 2.1-2.3), G2 (Keras 2) or G3 (Keras 3).

One detector for the linter, ``mplint.runtime`` and ``mplint verify``: config first, then
the project's pins, then the program's own imports. Each is a *range* of generations (``oldest`` to
``value``): a pin ``tensorflow>=2.6`` admits Keras 2 and Keras 3; no evidence admits every supported one.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Generation:
    value: int  # 0 (TF1), 1, 2 or 3
    source: str  # human-readable: where the value came from
    # config | pin-tf-keras | pin-keras | pin-tensorflow | imports | default
    origin: str = "default"
    tf_newest: str = ""  # the newest TensorFlow the pins allow, when they say ("2.8.0")
    oldest: int = -1  # the oldest generation of the range; -1: ``value`` alone
    tf_range: str = ""  # the TensorFlow versions the evidence admits, when it names them ("TF 2.4", "TF >= 2.6")

    @property
    def low(self) -> int:
        return self.value if self.oldest < 0 else self.oldest

    def admits(self, generation: int) -> bool:
        return self.low <= generation <= self.value

    @property
    def evidenced(self) -> bool:
        """Whether something (config, a pin, the code's imports) says which TensorFlow runs the code. An unknown
        range says nothing about which part of it the user runs: a rewrite that holds on part of it is a guess."""
        return self.origin != "default"

    @property
    def label(self) -> str:
        """The range: "Keras 2", "Keras 2 or Keras 3 (TF >= 2.6)"."""
        names = " or ".join(_NAMES[g] for g in range(self.low, self.value + 1))
        return f"{names} ({self.tf_range})" if self.tf_range else names


_NAMES = {0: "G0 (TF1)", 1: "G1 (TF 2.1-2.3)", 2: "Keras 2", 3: "Keras 3"}

# Nothing says which TensorFlow runs the code: every supported one may. ``value`` stays the newest, which decides
# what a rule looks for; a fix that holds on part of the range only is not offered.
DEFAULT = Generation(
    3,
    "no pin, config or Keras import: any supported TensorFlow (set `target` or pin tensorflow)",
    "default",
    oldest=1,
    tf_range="TF >= 2.1",
)

# TF_USE_LEGACY_KERAS values that select Keras 2, for code read statically and for the running process alike.
LEGACY_KERAS_VALUES = frozenset({"1", "true", "yes"})


def legacy_keras_value(value: str) -> bool:
    return value.strip().lower() in LEGACY_KERAS_VALUES


TARGETS = {"tf1": 0, "tf2.3": 1, "keras2": 2, "keras3": 3}  # --target / config `target`


def from_setting(value: int, where: str) -> Generation:
    return Generation(value, f"target {Generation(value, '').label} from {where}", "config")


def from_imports(
    keras_imports: set[str] | frozenset[str], legacy_env: bool, whose: str = "the code", tf1: bool = False
) -> Generation | None:
    """What a program's own code says: tf_keras or TF_USE_LEGACY_KERAS=1 is Keras 2, TF1 sessions/Estimators
    without a Keras policy are TF1, `import keras` Keras 3. tf_keras comes first: it exists on TF 2 only, where
    ``tf.compat.v1`` graphs and sessions run too (tf_keras' own backend has them)."""
    if "tf_keras" in keras_imports or legacy_env:
        return Generation(2, f"{whose} imports tf_keras / sets TF_USE_LEGACY_KERAS=1", "imports")
    if tf1:
        return Generation(
            0, f"{whose} uses TF1 (sessions, Estimators, tf.compat.v1 graphs) and sets no Keras policy", "imports"
        )
    if "keras" in keras_imports:
        return Generation(3, f"{whose} imports Keras 3 (`import keras`)", "imports")
    return None
