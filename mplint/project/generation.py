"""The Keras generation a program targets: G1 (TF 2.1-2.3), G2 (Keras 2) or G3 (Keras 3).

One detector for the linter, ``mplint.runtime`` and ``mplint verify``: config first, then
the project's pins, then the program's own imports, then Keras 3.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Generation:
    value: int  # 1, 2 or 3
    source: str  # human-readable: where the value came from
    # config | pin-tf-keras | pin-keras | pin-tensorflow | imports | default
    origin: str = "default"

    @property
    def label(self) -> str:
        return {1: "G1 (TF 2.1-2.3 experimental API)", 2: "Keras 2", 3: "Keras 3"}[self.value]


DEFAULT = Generation(3, "no pin or config: Keras 3, what a current TensorFlow installs (set keras = 2 to target Keras 2)")


def from_imports(keras_imports: set[str] | frozenset[str], legacy_env: bool, whose: str = "the code") -> Generation | None:
    """What a program's own imports say: tf_keras or TF_USE_LEGACY_KERAS=1 is Keras 2, `import keras` Keras 3."""
    if "tf_keras" in keras_imports or legacy_env:
        return Generation(2, f"{whose} imports tf_keras / sets TF_USE_LEGACY_KERAS=1", "imports")
    if "keras" in keras_imports:
        return Generation(3, f"{whose} imports Keras 3 (`import keras`)", "imports")
    return None
