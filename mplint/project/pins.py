"""The target Keras generation read from a project's dependency pins."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import Version

from mplint.project.generation import Generation


_TF_PACKAGES = {"tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-macos", "tf-nightly", "tensorflow-intel"}
_TF_SAMPLES = [Version(f"2.{minor}.0") for minor in range(1, 40)]
_KERAS_SAMPLES = [Version(v) for v in ("2.4.0", "2.15.0", "3.0.0", "3.20.0", "4.0.0")]
_REQ_LINE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*(?:\[[^\]]*\])?\s*[^#;]*)")


def _requirements_in_text(text: str) -> Iterable[Requirement]:
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "-")):
            continue
        m = _REQ_LINE.match(line)
        if m:
            try:
                yield Requirement(m.group(1).strip())
            except InvalidRequirement:
                continue


def _requirements_in_pyproject(text: str) -> Iterable[Requirement]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python < 3.11
        import tomli as tomllib
    try:
        data = tomllib.loads(text)
    except Exception:
        return
    project = data.get("project", {})
    specs = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        specs.extend(extra)
    poetry = data.get("tool", {}).get("poetry", {}).get("dependencies", {})
    for name, spec in poetry.items():
        version = spec if isinstance(spec, str) else spec.get("version", "") if isinstance(spec, dict) else ""
        specs.append(f"{name}{_poetry_spec(version)}")
    for spec in specs:
        try:
            yield Requirement(spec)
        except InvalidRequirement:
            continue


def _poetry_spec(version: str) -> str:
    version = version.strip()
    if not version or version == "*":
        return ""
    if version.startswith("^"):
        base = Version(version[1:])
        return f">={base},<{base.major + 1}" if base.major else f">={base},<0.{base.minor + 1}"
    if version.startswith("~"):
        base = Version(version.lstrip("~="))
        return f">={base},<{base.major}.{base.minor + 1}"
    return version if version[0] in "<>=!" else f"=={version}"


def _requirements_in_setup(text: str) -> Iterable[Requirement]:
    for literal in re.findall(r"""["']((?:tensorflow|tf-keras|tf_keras|keras|tf-nightly)[^"']*)["']""", text):
        try:
            yield Requirement(literal)
        except InvalidRequirement:
            continue


def _mentioned(req: Requirement) -> list[Version]:
    """Versions named in the specifier itself (``==2.15.1`` admits no sample like 2.15.0)."""
    out = []
    for spec in req.specifier:
        try:
            out.append(Version(spec.version.replace(".*", ".0")))
        except ValueError:
            continue
    return out


def generation_from_pins(root: Path) -> Generation | None:
    found: list[tuple[Requirement, str]] = []
    files = sorted(root.glob("requirements*.txt")) + sorted(root.glob("requirements/*.txt"))
    for path in files:
        found += [(r, path.name) for r in _requirements_in_text(_read(path))]
    if (root / "pyproject.toml").is_file():
        found += [(r, "pyproject.toml") for r in _requirements_in_pyproject(_read(root / "pyproject.toml"))]
    for name in ("setup.py", "setup.cfg"):
        if (root / name).is_file():
            found += [(r, name) for r in _requirements_in_setup(_read(root / name))]
    for req, where in found:
        if req.name.lower().replace("_", "-") == "tf-keras":
            return Generation(2, f"{where} pins {req} (legacy Keras 2)", "pin-tf-keras")
    for req, where in found:
        if req.name.lower() == "keras":
            allowed = [v for v in _KERAS_SAMPLES + _mentioned(req) if req.specifier.contains(v, prereleases=True)]
            if allowed:
                return Generation(3 if max(allowed).major >= 3 else 2, f"{where} pins {req}", "pin-keras")
    for req, where in found:
        if req.name.lower() in _TF_PACKAGES:
            allowed = [v for v in _TF_SAMPLES + _mentioned(req) if req.specifier.contains(v, prereleases=True)]
            if allowed:
                newest = max(allowed)
                value = 3 if newest >= Version("2.16") else 2 if newest >= Version("2.4") else 1
                return Generation(value, f"{where} pins {req}", "pin-tensorflow")
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


