"""The generated programs the ``ci`` fuzz profile runs, drawn once and kept in ``tests/data/fuzz/``.

hypothesmith draws programs from Python's grammar; drawing is about 95% of a generated case's cost (50-80 ms a
program, against 4 ms for the engine's five passes over it), and the ``ci`` profile is derandomized, so every
run drew the very same programs. They are drawn once, by hypothesis with that profile, and kept; the ``long``
profile still draws new ones on every run. Redraw after upgrading hypothesmith, or to change how many:

    python tests/fuzz_corpus.py

Each file is JSON lines (one program a line; ``ensure_ascii`` keeps the lone surrogates hypothesmith may put
in a string), distinct programs in the order they were drawn.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

FOLDER = Path(__file__).resolve().parent / "data" / "fuzz"

#: file stem -> (hypothesmith strategy, cases hypothesis is asked for)
DRAWS = {
    "from_grammar": ("from_grammar", 2_600),  # whole programs
    "from_node": ("from_node", 600),  # statements appended to a corpus program
}


def load(stem: str) -> list[str]:
    with (FOLDER / f"{stem}.jsonl").open(encoding="ascii") as lines:
        return [json.loads(line) for line in lines]


def draw(stem: str) -> list[str]:
    """Run hypothesis (the ``ci`` profile: derandomized, no database) over the strategy; the programs it drew."""
    import hypothesmith
    from fuzz_strategies import PROFILE  # noqa: F401  (registers the profiles)
    from hypothesis import given, settings

    strategy, cases = DRAWS[stem]
    drawn: dict[str, None] = {}

    @settings(settings.get_profile("ci"), max_examples=cases)
    @given(getattr(hypothesmith, strategy)())
    def record(code: str) -> None:
        drawn.setdefault(code, None)

    record()
    return list(drawn)


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    FOLDER.mkdir(parents=True, exist_ok=True)
    for stem in DRAWS:
        programs = draw(stem)
        text = "".join(json.dumps(p, ensure_ascii=True) + "\n" for p in programs)
        (FOLDER / f"{stem}.jsonl").write_text(text, encoding="ascii")
        print(f"{stem}: {len(programs)} distinct programs, {len(text.encode()):,} bytes")


if __name__ == "__main__":
    main()
