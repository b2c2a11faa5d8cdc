"""Writing a checked file back: its fixes, or ``noqa`` comments for every finding (--add-noqa), atomically."""

from __future__ import annotations

import io
import tokenize
from collections.abc import Callable
from pathlib import Path

from mplint.diagnostics import FileResult
from mplint.engine.check_options import FIX_REVERTED, OVER_BUDGET, PARSE_ERROR, RULE_CRASHED
from mplint.engine.notebooks import NotebookResult
from mplint.project.writer import FileChangedError, write_atomic

ENGINE_CODES = {PARSE_ERROR, FIX_REVERTED, RULE_CRASHED, OVER_BUDGET}


CHANGED_NOTICE = "not fixed: the file changed on disk after mplint read it; run mplint again"


def write_back(
    path: Path,
    display: str,
    data: bytes,
    result: FileResult,
    recheck: Callable[[bytes], FileResult],
    add_noqa_comments: bool,
    errors: list[str],
    changed_on_disk: list[str],
) -> tuple[FileResult, int, int]:
    """Write ``result``'s fixes (and noqa comments) to ``path``, which must still hold ``data``; on a write
    failure the file is checked again as it is. A file changed since it was read is left alone, named in
    ``errors`` and ``changed_on_disk``. Returns the result that holds, and the noqa lines (changed, skipped)."""
    changed = skipped = 0
    if result.fixed_source is not None:
        try:
            write_atomic(path, result.fixed_source, expected=data)
        except FileChangedError:
            return _left_alone(path, display, data, recheck, errors, changed_on_disk), 0, 0
        except OSError as exc:
            errors.append(f"{display}: cannot write fixes: {exc.strerror or exc}")
            result = recheck(data)
    if add_noqa_comments:
        new, changed, skipped = with_noqa(result, data)
        if new is not None:
            try:
                write_atomic(path, new, expected=data)
            except FileChangedError:
                return _left_alone(path, display, data, recheck, errors, changed_on_disk), 0, 0
            except OSError as exc:
                errors.append(f"{display}: cannot write noqa comments: {exc.strerror or exc}")
                changed = 0
            else:
                result = recheck(new)
    return result, changed, skipped


def _left_alone(
    path: Path,
    display: str,
    data: bytes,
    recheck: Callable[[bytes], FileResult],
    errors: list[str],
    changed_on_disk: list[str],
) -> FileResult:
    """The findings of the file as it is now (the user's edit wins)."""
    errors.append(f"{display}: {CHANGED_NOTICE}")
    changed_on_disk.append(display)
    try:
        return recheck(path.read_bytes())
    except OSError:
        return recheck(data)


def with_noqa(result: FileResult, data: bytes) -> tuple[bytes | None, int, int]:
    """The file's bytes with every finding suppressed: (new bytes or None, lines changed, lines skipped)."""
    found = [d for d in result.diagnostics if d.rule_id not in ENGINE_CODES and not d.fixed]
    if not found:
        return None, 0, 0
    nb = result.notebook if isinstance(result, NotebookResult) else None
    targets: dict[int, set[str]] = {}
    for d in found:
        line = nb.virtual_line(d.cell, d.line) if nb else d.line
        targets.setdefault(line, set()).add(d.rule_id)
    from mplint.baseline import add_noqa

    if nb:
        code, changed, skipped = add_noqa(nb.virtual, targets)
        return (nb.rewrite(code) if changed else None), changed, skipped
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        text = data.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError):
        return None, 0, len(targets)
    code, changed, skipped = add_noqa(text, targets)
    return (code.encode(encoding) if changed else None), changed, skipped
