"""A training loop's name in the report and its end at the step cap: what the PyTorch and Keras hooks share.

A step belongs to the outermost running loop of the script's files (``loops.current``); that loop is named by
the original script's lines (``loop at train.py:12``, also in a fixed copy's run) and, once its optimizers have
made their capped steps, ended from inside (``loops.LoopCapped``) so that the script goes on after it.
"""

from __future__ import annotations

import os

from mplint.verify import loops, recorder


def R() -> recorder.Recorder:
    rec = recorder.RECORDER
    assert rec is not None, "the hooks run only in a recorded script"
    return rec


def loop_label(site: loops.Site, known: dict) -> str:
    """``loop at train.py:12``, named by the original script's lines in a fixed copy's run too."""
    place = _original_place
    if (
        site.line is None or site.file is None
    ):  # the loop is not the script's (a library's trainer): name the call into it
        return "loop in the call at {}:{}".format(*place(*site.calls[0])) if site.calls else "custom loop #1"
    label = "loop at {}:{}".format(*place(site.file, site.line))
    first = next((key for key, known_label in known.items() if known_label == label), None)
    if first is not None and first != site.key and site.calls:  # one loop of a function called twice
        if first[0]:
            R().loop_aliases[label] = "{} via {}:{}".format(label, *place(*first[0][-1]))
        label += " via {}:{}".format(*place(*site.calls[-1]))
    return label


def _original_place(file: str, line: int) -> tuple[str, int]:
    config = R().config
    if file == os.path.basename(config["script"]):
        line = config.get("line_map", {}).get(str(line), line)
    return file, line


def end_loop(site: loops.Site, loop: str) -> None:
    """End the loop that reached its cap (LoopCapped, caught by the loop, and the script goes on after it); where
    the script runs no loop around the step, or caught the stop, the run ends here."""
    rec = R()
    if site.frame is None or site.line is None or loop in rec.capped_loops:
        if loop in rec.capped_loops:
            rec.note(
                "loop_stops", f"the script caught the end of the {loop} and went on: the run ended at its next step"
            )
        _note_loops_not_run(loop)
        rec.finish("step-cap")
    rec.capped_loops.add(loop)
    rec.last_capped, rec.loop = loop, None
    raise loops.LoopCapped(site.frame, site.line)


def _note_loops_not_run(loop: str) -> None:
    """The script's training loops that the run ends before."""
    rec = R()
    script = rec.config["script"]
    try:
        with open(script, encoding="utf-8") as fh:
            lines = loops.not_run(fh.read(), rec.step_lines)
    except (OSError, UnicodeDecodeError):
        return
    if lines:
        name = os.path.basename(script)
        where = ", ".join(f"{name}:{line}" for line in lines)
        further = f"a further training loop at {where}" if len(lines) == 1 else f"further training loops at {where}"
        rec.note(
            "loop_stops", f"stopped after {rec.cap} steps of the {loop}; the script has {further} that did not run"
        )
