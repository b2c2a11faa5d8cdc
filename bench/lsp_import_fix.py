"""Language server: ``codeAction/resolve`` of a quick fix that adds an import, asked at once and after a pause.

    git archive <commit> | tar -x -C /tmp/mplint-<commit>
    python bench/lsp_import_fix.py [--before /tmp/mplint-<commit>] [--repeats 3]

The file: bench/lsp.py's blocks with ``set_floatx("float16")`` at the end (MP602, whose fix adds
``mixed_precision`` to ``from keras import layers``). Each session opens it, waits for its diagnostics,
waits 0, 2 or 3 s, lists the code actions and times the resolve of MP602's fix (bench/lsp.py's client).
Prints the median per server and pause, in milliseconds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lsp  # noqa: E402

TEXT = (
    lsp.HEADER.replace('keras.mixed_precision.set_global_policy("mixed_float16")\n', "")
    + "from keras.backend import set_floatx\n"
    + "".join(lsp.BLOCK.format(i=i, units=32 + 8 * i) for i in range(32))
    + '\n\nset_floatx("float16")\n'
)
WHOLE = {"start": {"line": 0, "character": 0}, "end": {"line": 10_000, "character": 0}}


def session(command: list[str], root: Path, pause: float) -> float:
    client, _ = lsp.start(command, root, pull=False)
    try:
        path = root / "floatx.py"
        path.write_text(TEXT)
        uri, _, _ = lsp.open_file(client, path)
        _, diagnostics = client.published(uri)
        time.sleep(pause)
        _, offered = client.request(
            "textDocument/codeAction",
            {"textDocument": {"uri": uri}, "range": WHOLE, "context": {"diagnostics": diagnostics}},
        )
        [fix] = [a for a in offered if a["title"].startswith("Fix MP602")]
        took, resolved = client.request("codeAction/resolve", fix)
        assert "from keras import mixed_precision, layers" in str(resolved.get("edit")), resolved
        return took * 1000
    finally:
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--before", type=Path, help="a folder holding an earlier mplint checkout, timed beside")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = lsp.project(Path(tmp))
        for name, command in lsp.servers(None, args.before).items():
            if name == "ruff":
                continue  # no import-adding fix to resolve
            for pause in (0.0, 2.0, 3.0):
                times = [session(command, root, pause) for _ in range(args.repeats)]
                print(
                    f"{name}: resolve {pause:.0f} s after the diagnostics: median {statistics.median(times):.0f} ms "
                    f"({', '.join(f'{t:.0f}' for t in times)})"
                )


if __name__ == "__main__":
    main()
