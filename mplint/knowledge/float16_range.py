"""float16's range, shared by the Keras (MP601) and PyTorch (MPT601) overflow rules."""

from __future__ import annotations

import re

FLOAT16_MAX = 65504.0
FLOAT16_TINY = 6e-8  # below this a value flushes to zero (smallest subnormal: 5.96e-8)
FLOAT32_MAX = 3.4028234663852886e38  # what `tf.float32.max` and `torch.finfo(torch.float32).max` hold

# How messages say it (one wording for every rule and the runtime checks)
OUTSIDE_FLOAT16 = f"is outside float16's range (largest finite value {FLOAT16_MAX:g})"
FLUSHES_IN_FLOAT16 = f"flushes to 0 in float16 (smallest subnormal {FLOAT16_TINY:.0e})".replace("e-0", "e-")

# Byte triggers for literals out of float16's range (each starts with a character class the regex
# engine can skip ahead to).
LARGE_OR_TINY_EXPONENT = re.compile(rb"\d[eE](?:\+?(?:[4-9]|\d\d)|-(?:[89]|\d\d))\b")  # 1e4.., 1e-8..
# 60000.., 100000.. not after a word character or a dot; the look-behind follows the first digit, so the regex
# engine skips to digits instead of trying it at every byte (a third of the scan).
LARGE_INTEGER = re.compile(rb"(?:[6-9](?<![\w.][6-9])\d{4}|\d(?<![\w.]\d)\d{5,})(?!\d)")
# Any of these or `0.00000001`: a file that may hold a literal float16 cannot hold (the summaries' first test).
OUT_OF_RANGE_LITERAL = re.compile(LARGE_OR_TINY_EXPONENT.pattern + rb"|" + LARGE_INTEGER.pattern + rb"|\.0{7}")
