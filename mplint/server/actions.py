"""Code actions: each finding's fix (unsafe ones say so), a ``noqa`` comment, fix all (a file or a cell),
and fix all over a whole notebook.

Actions are listed from the last check (the diagnostics carry their rule, the finding's own edits and
the imports its fix adds in ``data``); their edits are made by ``codeAction/resolve`` when the client
resolves edits (else before answering). A finding's fix is its own edits and its imports, added to
the checked text where applying the fix adds them, without running the rules again. "Fix all" is
``mplint --fix`` on the buffer (safe fixes, unsafe ones too when the configuration asks for them), as
the command line would write it.
"""

from __future__ import annotations

from mplint.diagnostics import Edit, ImportSpec
from mplint.server import edits
from mplint.server.documents import Buffer, Part, Settings, check, fixed_texts
from mplint.server.positions import Codec

QUICK_FIX = "quickfix"
FIX_ALL = "source.fixAll.mplint"
NOTEBOOK_FIX_ALL = "notebook.source.fixAll.mplint"
ENGINE_RULES = ("MP000", "MP001", "MP002", "MP003")  # no noqa: they are about the file, not a line


def _data(d: dict) -> dict | None:
    data = d.get("data")
    return data if d.get("source") == "mplint" and isinstance(data, dict) and "rule" in data else None


def wants(only: list[str] | None, kind: str) -> bool:
    """Whether a request limited to the kinds ``only`` asks for actions of ``kind`` (a kind covers its sub-kinds).
    Notebook-wide kinds are only given when asked for by name, as editors expect."""
    if not only:
        return not kind.startswith("notebook.")
    return any(kind == k or kind.startswith(k + ".") for k in only)


def fix_action(part: Part, d: dict) -> dict | None:
    """A finding's fix, its edit left to ``resolve_fix``."""
    data = _data(d)
    if data is None or data["safety"] not in ("safe", "unsafe") or not data.get("edits"):
        return None
    unsafe = data["safety"] == "unsafe"
    title = f"Fix {data['rule']}: {data['fix'] or data['name']}" + (" (unsafe: may change results)" if unsafe else "")
    return {
        "title": title,
        "kind": QUICK_FIX,
        "diagnostics": [d],
        "isPreferred": not unsafe,
        "data": {"action": "fix", "uri": part.uri},
    }


def fix_imports(d: dict) -> tuple[ImportSpec, ...]:
    """The imports a finding's fix adds, as its check gave them."""
    return tuple(ImportSpec(*i) for i in (_data(d) or {}).get("imports") or ())


def with_imports(buffer: Buffer, result, imports: tuple[ImportSpec, ...]) -> dict[str, str] | None:
    """URI -> new text of each part of ``buffer`` that adding ``imports`` changes, placed where applying a fix
    places them; from the buffer and its last check (``result``) alone. ``None`` where its text cannot be
    parsed back to itself (then ``fixed_by_rule`` decides)."""
    import libcst as cst

    from mplint.engine.check import parse
    from mplint.engine.edits import add_imports

    nb = getattr(result, "notebook", None)
    text = nb.virtual if nb is not None else buffer.parts[0].text
    module = parse(str(buffer.path), text.encode("utf-8") if nb is not None else buffer.source())
    if not isinstance(module, cst.Module) or module.code != text:
        return None
    new = add_imports(module, imports).code
    if nb is None:
        return {buffer.parts[0].uri: new} if new != text else {}
    texts = nb.cell_texts(new)
    if texts is None:
        return None
    return {p.uri: texts[p.cell] for p in buffer.parts if p.cell in texts and texts[p.cell] != p.text}


def fixed_by_rule(buffer: Buffer, d: dict, folder, settings: Settings, **context) -> dict[str, str]:
    """URI -> new text of each part the finding's rule fixes: a check of the buffer fixing that rule alone.
    ``context``: ``check``'s ``others`` and ``warm``."""
    data = _data(d)
    after = check(
        buffer, folder, fix=True, unsafe=data["safety"] == "unsafe", select=[data["rule"]], settings=settings, **context
    )
    return fixed_texts(buffer, after)


def resolve_fix(buffer: Buffer, part: Part, d: dict, found: list[dict], codec: Codec, fixed: dict[str, str]) -> dict:
    """The fix's edit: the finding's own edits, and the lines of ``fixed`` (URI -> new text of parts: what
    ``with_imports`` or ``fixed_by_rule`` made) that no finding of the rule in ``found`` (the last check's
    diagnostics of the buffer) touches: the imports its fix adds."""
    data = _data(d)
    changes = {part.uri: edits.from_edits(codec, part.text, tuple(Edit(*e) for e in data["edits"]))}
    touched: dict[int | None, set[int]] = {}
    for other in found:
        if other["data"]["rule"] == data["rule"]:
            for e in other["data"]["edits"]:
                touched.setdefault(other["data"]["cell"], set()).update(range(e[0] - 1, e[2]))
    for uri, text in fixed.items():
        other = next(p for p in buffer.parts if p.uri == uri)
        hunks = [
            h
            for h in edits.line_hunks(other.text, text)
            if not touched.get(other.cell, set()) & set(range(h[0], max(h[1], h[0] + 1)))
        ]
        if hunks:
            changes[uri] = changes.get(uri, []) + edits.from_hunks(codec, other.text, hunks)
    return {"changes": changes}


def noqa_action(part: Part, d: dict) -> dict | None:
    """A ``noqa`` comment for the finding, its edit left to ``resolve_noqa``."""
    data = _data(d)
    if data is None or data["rule"] in ENGINE_RULES:
        return None
    return {
        "title": f"Suppress {data['rule']} on this line (noqa)",
        "kind": QUICK_FIX,
        "diagnostics": [d],
        "data": {"action": "noqa", "uri": part.uri},
    }


def resolve_noqa(part: Part, d: dict, result, codec: Codec) -> dict | None:
    """``# noqa: MPnnn`` on the finding's first line, merged into an existing noqa comment; ``None`` where the
    line cannot carry one (inside a string)."""
    from mplint.baseline import add_noqa

    data = _data(d)
    nb = getattr(result, "notebook", None)
    if nb is not None:
        new, changed, _ = add_noqa(nb.virtual, {nb.virtual_line(part.cell, data["line"]): {data["rule"]}})
        texts = nb.cell_texts(new) if changed else None
        text = texts.get(part.cell) if texts else None
    else:
        text, changed, _ = add_noqa(part.text, {data["line"]: {data["rule"]}})
    if not changed or text is None or text == part.text:
        return None
    return {"changes": {part.uri: edits.whole_change(codec, part.text, text)}}


def fix_all_action(part: Part, kind: str) -> dict:
    """Fix all in ``part`` (``FIX_ALL``) or in every cell of its notebook (``NOTEBOOK_FIX_ALL``), edit left to resolve."""
    title = "Fix all mplint findings" + (" in the notebook" if kind == NOTEBOOK_FIX_ALL else "")
    return {"title": title, "kind": kind, "data": {"action": "fixAll", "uri": part.uri}}


def resolve_fix_all(
    buffer: Buffer,
    part: Part,
    kind: str,
    folder,
    codec: Codec,
    settings: Settings,
    unsafe: bool | None = None,
    **context,
) -> dict | None:
    """The edit of a fix-all action, ``None`` when there is nothing to fix. ``unsafe``: whether unsafe fixes are
    made too (``None``: as the configuration says); ``context``: ``check``'s ``others`` and ``warm``."""
    result = check(buffer, folder, fix=True, unsafe=unsafe, settings=settings, **context)
    texts = {p.uri: p.text for p in buffer.parts}
    changes = {
        uri: edits.whole_change(codec, texts[uri], text)
        for uri, text in fixed_texts(buffer, result).items()
        if kind == NOTEBOOK_FIX_ALL or uri == part.uri
    }
    return {"changes": changes} if changes else None
