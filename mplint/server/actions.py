"""Code actions: each finding's fix (unsafe ones say so), fix all, and a ``noqa`` comment.

A finding's fix is the replacement the rule proposed (carried in the diagnostic's
``data``), plus the imports the same rule's fix adds: those come from fixing the buffer
with that rule alone and keeping the changed lines that no finding of the rule touches.
"Fix all" is ``mplint --fix`` on the buffer (safe fixes, unsafe ones too when the
configuration asks for them), as the command line would write it.
"""

from __future__ import annotations

from lsprotocol import types
from pygls.workspace.position_codec import PositionCodec

from mplint.diagnostics import Edit
from mplint.server import edits
from mplint.server.documents import Buffer, Part, check, fixed_texts

FIX_ALL = f"{types.CodeActionKind.SourceFixAll.value}.mplint"


def _data(d: types.Diagnostic) -> dict | None:
    return d.data if d.source == "mplint" and isinstance(d.data, dict) and "rule" in d.data else None


def _finding_edits(data: dict) -> tuple[Edit, ...]:
    return tuple(Edit(*e) for e in data.get("edits", ()))


def fix_action(buffer: Buffer, part: Part, d: types.Diagnostic, folder, codec: PositionCodec) -> types.CodeAction | None:
    data = _data(d)
    if data is None or data["safety"] not in ("safe", "unsafe") or not data.get("edits"):
        return None
    unsafe = data["safety"] == "unsafe"
    changes = {part.uri: edits.from_edits(codec, part.text, _finding_edits(data))}
    for uri, added in _imports_for(buffer, data["rule"], unsafe, folder, codec).items():
        changes[uri] = changes.get(uri, []) + added
    title = f"Fix {data['rule']}: {data['fix'] or data['name']}" + (" (unsafe: may change results)" if unsafe else "")
    return types.CodeAction(title=title, kind=types.CodeActionKind.QuickFix, diagnostics=[d],
                            is_preferred=not unsafe, edit=types.WorkspaceEdit(changes=changes))


def _imports_for(buffer: Buffer, rule: str, unsafe: bool, folder, codec: PositionCodec) -> dict[str, list[types.TextEdit]]:
    """Lines the rule's fix adds that no finding of the rule touches (its imports), per part."""
    before = check(buffer, folder, select=[rule])
    after = check(buffer, folder, fix=True, unsafe=unsafe, select=[rule])
    touched: dict[int | None, set[int]] = {}
    for d in before.diagnostics:
        for e in d.edits:
            touched.setdefault(d.cell, set()).update(range(e.line - 1, e.end_line))
    out = {}
    for uri, text in fixed_texts(buffer, after).items():
        part = next(p for p in buffer.parts if p.uri == uri)
        hunks = [h for h in edits.line_hunks(part.text, text)
                 if not touched.get(part.cell, set()) & set(range(h[0], max(h[1], h[0] + 1)))]
        if hunks:
            out[uri] = edits.from_hunks(codec, part.text, hunks)
    return out


def noqa_action(buffer: Buffer, part: Part, d: types.Diagnostic, result, codec: PositionCodec) -> types.CodeAction | None:
    """``# noqa: MPnnn`` on the finding's first line, merged into an existing noqa comment."""
    from mplint.baseline import add_noqa

    data = _data(d)
    if data is None or data["rule"] in ("MP000", "MP001", "MP002", "MP003"):
        return None
    nb = getattr(result, "notebook", None)
    if nb is not None:
        new, changed, _ = add_noqa(nb.virtual, {nb.virtual_line(part.cell, data["line"]): {data["rule"]}})
        texts = nb.cell_texts(new) if changed else None
        text = texts.get(part.cell) if texts else None
    else:
        text, changed, _ = add_noqa(part.text, {data["line"]: {data["rule"]}})
    if not changed or text is None or text == part.text:
        return None
    return types.CodeAction(title=f"Suppress {data['rule']} on this line (noqa)", kind=types.CodeActionKind.QuickFix,
                            diagnostics=[d], edit=types.WorkspaceEdit(changes={part.uri: edits.whole_change(codec, part.text, text)}))


def fix_all_action(buffer: Buffer, folder, codec: PositionCodec, only_part: Part | None = None) -> types.CodeAction | None:
    result = check(buffer, folder, fix=True)
    changes = {uri: edits.whole_change(codec, next(p.text for p in buffer.parts if p.uri == uri), text)
               for uri, text in fixed_texts(buffer, result).items()
               if only_part is None or uri == only_part.uri}
    if not changes:
        return None
    return types.CodeAction(title="Fix all mplint findings", kind=FIX_ALL, edit=types.WorkspaceEdit(changes=changes))


def wants(only: list[str] | None, kind: str) -> bool:
    """Whether a request limited to the kinds ``only`` asks for actions of ``kind`` (a kind covers its sub-kinds)."""
    return not only or any(kind == k or kind.startswith(k + ".") for k in only)
