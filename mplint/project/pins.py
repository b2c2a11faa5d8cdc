"""The target TensorFlow/Keras of a program, read from the nearest dependency pins above it.

Every source is read with a real parser: requirements files (``-r`` includes, ``-c``
constraints) with ``packaging``, PEP 621 and Poetry tables with ``tomllib``, the
``install_requires`` of the project's own packaging script (a ``setup()`` call, evaluated for
constants, names and ``+``), setup.cfg, conda environment files, Pipfiles, the ``Requires-Dist`` of an unpacked distribution's
PKG-INFO/METADATA, and the image of the stage a Dockerfile runs (``ARG``/``ENV`` substituted; NGC
``YY.MM`` tags bounded by the verified releases of ``mplint.knowledge.ngc_images``, the unflavoured TensorFlow
``YY.MM-py3`` of the TF 1 years included, official ``tensorflow/tensorflow:X.Y`` and
``pytorch/pytorch:X.Y.Z-...``). Last in each folder, what its README documents: the versioned images it names and
its install commands (``pip install tensorflow==2.4.0``), for a folder whose pins say nothing.
"""

from __future__ import annotations

import ast
import configparser
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from mplint.project.generation import Generation

if TYPE_CHECKING:  # packaging is imported when a pin file is read: most warm runs read none
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

_TF_PACKAGES = {
    "tensorflow",
    "tensorflow-cpu",
    "tensorflow-gpu",
    "tensorflow-macos",
    "tf-nightly",
    "tf-nightly-gpu",
    "tf-nightly-cpu",
    "tensorflow-intel",
    "intel-tensorflow",
    "tensorflow-aarch64",
}


@cache
def _samples(package: str) -> tuple[Version, ...]:
    """Versions a specifier is tested against (plus the versions it names itself)."""
    from packaging.version import Version

    if package == "keras":
        return tuple(Version(v) for v in ("2.4.0", "2.15.0", "3.0.0", "3.20.0", "4.0.0"))
    return tuple(Version(f"2.{minor}.0") for minor in range(0, 40))  # TF1 only where a pin names it


@cache
def torch_samples() -> tuple[Version, ...]:
    """Versions a torch specifier is tested against (plus the versions it names itself)."""
    from packaging.version import Version

    return tuple(Version(v) for v in [*(f"1.{m}.0" for m in range(14)), *(f"2.{m}.0" for m in range(31))])


_DOCKERFILE = re.compile(r"^(?:Dockerfile(?:[.-].*)?|.*\.[Dd]ockerfile)$")
_METADATA_FILES = ("PKG-INFO", "METADATA")


@dataclass(frozen=True)
class Pinned:
    """One requirement on TensorFlow, Keras or tf-keras, and the file that states it."""

    requirement: Requirement
    where: str  # file name, relative to the project root


# --- readers, one per kind of file ------------------------------------------------------------


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


@dataclass(frozen=True)
class Requirement:
    """What the pins read of a PEP 508 requirement: the project's name as written, its version specifier and
    how the requirement reads (packaging's ``str(Requirement)``: extras and markers included)."""

    name: str
    specifier: SpecifierSet
    shown: str

    def __str__(self) -> str:
        return self.shown


def _requirement(spec: str) -> Requirement | None:
    return _parsed_requirement(spec.strip())


# A name and version clauses, nothing else: most lines of pin files. Such a line is read with packaging's
# SpecifierSet alone; any other goes through its whole PEP 508 parser, whose import compiles its tokenizer's
# patterns (about 20 ms, a tenth of an editor's first diagnostics). tests/test_targets.py holds both to the same
# answers.
_PLAIN = re.compile(
    r"([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*"
    r"((?:===|~=|==|!=|<=|>=|<|>)\s*[A-Za-z0-9_.*+!-]+(?:\s*,\s*(?:===|~=|==|!=|<=|>=|<|>)\s*[A-Za-z0-9_.*+!-]+)*)?"
)


@cache
def _parsed_requirement(spec: str) -> Requirement | None:
    """One parse per distinct string: a project's pin files repeat the same lines (``-r`` includes, a
    requirements file per sub-project)."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    plain = _PLAIN.fullmatch(spec)
    if plain is not None:
        try:
            specifier = SpecifierSet(plain.group(2) or "")
        except InvalidSpecifier:
            return None  # as packaging's parser answers such a line
        return Requirement(plain.group(1), specifier, f"{plain.group(1)}{specifier}")
    from packaging.requirements import InvalidRequirement
    from packaging.requirements import Requirement as Parsed

    try:
        parsed = Parsed(spec)
    except InvalidRequirement:
        return None
    return Requirement(parsed.name, parsed.specifier, str(parsed))


def _requirements_file(path: Path, seen: set[Path] | None = None) -> list[Requirement]:
    """A pip requirements file with its ``-r`` includes and ``-c`` constraints."""
    seen = seen if seen is not None else set()
    if path in seen or not path.is_file():
        return []
    seen.add(path)
    found: list[Requirement] = []
    text = _read(path).replace("\\\n", " ")
    for raw in text.splitlines():
        line = re.split(r"\s+#", raw, maxsplit=1)[0].strip()
        if not line or line.startswith("#"):
            continue
        include = re.match(r"^(?:-r|--requirement|-c|--constraint)[\s=]+(\S+)", line)
        if include:
            found += _requirements_file(path.parent / include.group(1), seen)
            continue
        if line.startswith("-"):
            continue  # -e, --index-url, -f ...
        line = re.split(r"\s+--", line, maxsplit=1)[0]  # --hash=... options
        req = _requirement(line)
        if req is not None:
            found.append(req)
    return found


def _toml(path: Path) -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python < 3.11
        import tomli as tomllib
    try:
        return tomllib.loads(_read(path))
    except Exception:
        return {}


def _pyproject(path: Path) -> list[Requirement]:
    data = _toml(path)
    project = data.get("project", {})
    specs = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        specs.extend(extra)
    poetry = data.get("tool", {}).get("poetry", {})
    tables = [poetry.get("dependencies", {}), poetry.get("dev-dependencies", {})]
    tables += [group.get("dependencies", {}) for group in poetry.get("group", {}).values()]
    for table in tables:
        for name, spec in table.items():
            specs.append(f"{name}{_loose_spec(spec)}")
    return [r for r in map(_requirement, specs) if r is not None]


def _loose_spec(spec) -> str:
    """Poetry's and Pipenv's version strings (``^2.13``, ``~2.13``, ``*``, ``{version = ...}``) as PEP 440."""
    version = spec if isinstance(spec, str) else spec.get("version", "") if isinstance(spec, dict) else ""
    version = version.strip()
    from packaging.version import InvalidVersion, Version

    try:
        if not version or version == "*":
            return ""
        if version.startswith("^"):
            base = Version(version[1:])
            return f">={base},<{base.major + 1}" if base.major else f">={base},<0.{base.minor + 1}"
        if version.startswith("~") and not version.startswith("~="):
            base = Version(version[1:])
            return f">={base},<{base.major}.{base.minor + 1}"
    except InvalidVersion:
        return ""
    return version if version[0] in "<>=!~" else f"=={version}"


def _pipfile(path: Path) -> list[Requirement]:
    data = _toml(path)
    specs = [
        f"{name}{_loose_spec(spec)}"
        for table in ("packages", "dev-packages")
        for name, spec in data.get(table, {}).items()
    ]
    return [r for r in map(_requirement, specs) if r is not None]


def _setup_cfg(path: Path) -> list[Requirement]:
    parser = configparser.ConfigParser()
    try:
        parser.read_string(_read(path))
    except configparser.Error:
        return []
    specs = parser.get("options", "install_requires", fallback="").splitlines()
    if parser.has_section("options.extras_require"):
        for _, value in parser.items("options.extras_require"):
            specs += value.splitlines()
    return [r for r in map(_requirement, (s for s in specs if s.strip())) if r is not None]


def _conda(path: Path) -> list[Requirement]:
    import yaml

    try:
        data = yaml.safe_load(_read(path)) or {}
    except yaml.YAMLError:
        return []
    specs: list[str] = []
    for item in data.get("dependencies", []) if isinstance(data, dict) else []:
        if isinstance(item, str):  # conda: name=2.8 or name=2.8.* or name>=2.8
            specs.append(_conda_spec(item))
        elif isinstance(item, dict):
            specs += [s for s in item.get("pip", []) if isinstance(s, str)]
    out = []
    for spec in specs:
        req = _requirement(spec if not re.search(r"==[\d.]+$", spec) or spec.count(".") > 1 else spec + ".*")
        if req is not None:
            out.append(req)
    return out


def _conda_spec(item: str) -> str:
    """A conda package spec as a pip one: ``pytorch=1.10`` -> ``torch==1.10`` (conda's PyTorch package is
    ``pytorch``), ``tensorflow-gpu=2.4.1`` -> ``tensorflow-gpu==2.4.1``."""
    spec = re.sub(r"^([\w.-]+)=(?!=)", r"\1==", item.split("::")[-1]).replace(" ", "")
    return re.sub(r"^pytorch(?=[=<>!~]|$)", "torch", spec)


def _setup_py(path: Path) -> list[Requirement]:
    """``install_requires``/``extras_require`` of a packaging script: a module that calls ``setup()``."""
    try:
        tree = ast.parse(_read(path))
    except (SyntaxError, ValueError):
        return []
    names: dict[str, object] = {}
    calls = []
    for stmt in _top_statements(tree.body):
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            value = _evaluate(stmt.value, names)
            if value is not None:
                names[stmt.targets[0].id] = value
        elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, ast.Add) and isinstance(stmt.target, ast.Name):
            value = _evaluate(ast.BinOp(ast.Name(stmt.target.id), ast.Add(), stmt.value), names)
            if value is not None:  # reqs += [...]
                names[stmt.target.id] = value
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Subscript):
            container, key = _evaluate(stmt.targets[0].value, names), _evaluate(stmt.targets[0].slice, names)
            if isinstance(container, dict) and isinstance(key, str):  # requirements["gpu"] = [...]
                container[key] = _evaluate(stmt.value, names)
        elif isinstance(stmt, ast.Expr) and _list_growth(stmt.value, names):
            continue
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            func = stmt.value.func
            if (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")) == "setup":
                calls.append(stmt.value)
    specs: list[str] = []
    for call in calls:
        for kw in call.keywords:
            value = _evaluate(kw.value, names)
            if kw.arg in ("install_requires", "requires") and isinstance(value, list):
                specs += [v for v in value if isinstance(v, str)]
            elif kw.arg == "extras_require" and isinstance(value, dict):
                specs += [v for extra in value.values() if isinstance(extra, list) for v in extra if isinstance(v, str)]
    return [r for r in map(_requirement, specs) if r is not None]


def _list_growth(call: ast.expr, names: dict) -> bool:
    """``reqs.append("x")`` / ``reqs.extend([...])`` on a list bound by name: applied to it."""
    if not (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and isinstance(call.func.value, ast.Name)
        and isinstance(names.get(call.func.value.id), list)
        and len(call.args) == 1
    ):
        return False
    value = _evaluate(call.args[0], names)
    if call.func.attr == "append" and isinstance(value, str):
        names[call.func.value.id] = [*names[call.func.value.id], value]
    elif call.func.attr == "extend" and isinstance(value, list):
        names[call.func.value.id] = [*names[call.func.value.id], *value]
    return True


def _top_statements(body: list[ast.stmt]):
    for stmt in body:
        yield stmt
        if isinstance(stmt, ast.If):  # if __name__ == "__main__": setup(...)
            yield from _top_statements(stmt.body)


def _evaluate(node: ast.AST, names: dict):
    """Constants, names bound to constants, lists, dicts and ``+`` of them; None when unknown."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [_evaluate(e, names) for e in node.elts]
        return [i for i in items if i is not None]
    if isinstance(node, ast.Dict):
        return {
            k: _evaluate(v, names)
            for k, v in zip((_evaluate(k, names) for k in node.keys), node.values)
            if k is not None
        }
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _evaluate(node.left, names), _evaluate(node.right, names)
        if isinstance(left, str) and isinstance(right, str) or isinstance(left, list) and isinstance(right, list):
            return left + right
    if isinstance(node, ast.Subscript):  # requirements["install"], EXTRAS["tf"][0]
        container, key = _evaluate(node.value, names), _evaluate(node.slice, names)
        if isinstance(container, dict) and isinstance(key, str):
            return container.get(key)
        if isinstance(container, list) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, int):
            return container[node.slice.value] if -len(container) <= node.slice.value < len(container) else None
        return None
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("dict", "list")
        and not node.args
    ):
        return {kw.arg: _evaluate(kw.value, names) for kw in node.keywords if kw.arg} if node.func.id == "dict" else []
    if isinstance(node, ast.JoinedStr):
        parts = [_evaluate(v.value if isinstance(v, ast.FormattedValue) else v, names) for v in node.values]
        return "".join(parts) if all(isinstance(p, str) for p in parts) else None
    return None


def _bounded(package: str, bounds, major: str = "") -> str:
    """``torch==2.10.0a0`` for a verified release, ``torch>=1.4.0a0,<=2.10.0a0`` between two, the major version
    (``tensorflow>=1,<2``) or nothing (``torch``) without a bound."""
    if bounds.exact:
        return f"{package}=={bounds.oldest}"
    parts = [
        f">={bounds.oldest}" if bounds.oldest else f">={major}" if major else "",
        f"<={bounds.newest}" if bounds.newest else f"<{int(major) + 1}" if major else "",
    ]
    return package + ",".join(p for p in parts if p)


def _image_requirements(image: str) -> list[Requirement]:
    """What a container image ships, as requirements (``torch==2.10.0a0``, ``torch>=1.4.0a0,<=2.10.0a0``,
    ``tensorflow>=2,<3``): NGC tags through the verified table ``mplint.knowledge.ngc_images``, and every dated image
    (``YY.MM``: NGC, NVIDIA's Merlin) bounded by the releases of its month (``mplint.knowledge.releases``)."""
    from mplint.knowledge import ngc_images, releases

    name, _, tag = image.partition(":")
    last = name.rsplit("/", 1)[-1].lower()
    month = releases.image_month(tag)
    nvidia = bool(re.search(r"(?:^|/)nvidia[n]?/", name.lower()))
    specs: list[str] = []
    ngc = re.match(r"(\d{2})\.(\d{2})(?:-(tf[12]))?-py[23]", tag)
    if nvidia and last == "tensorflow" and ngc:
        release = (int(ngc.group(1)), int(ngc.group(2)))
        if ngc.group(3) == "tf1" or (ngc.group(3) is None and release < ngc_images.FIRST_FLAVOURED_TENSORFLOW):
            specs.append(_bounded("tensorflow", ngc_images.between(ngc_images.TENSORFLOW1, release), "1"))
        elif ngc.group(3) == "tf2":  # no verified row: the flavour says TensorFlow 2, the month bounds it
            specs.append("tensorflow>=2,<3" + _released_by("tensorflow", month))
        elif month:  # an unflavoured tag after the split: only the month says something
            specs.append("tensorflow" + _released_by("tensorflow", month).lstrip(","))
    elif nvidia and last == "pytorch" and ngc:
        bounds = ngc_images.between(ngc_images.PYTORCH, (int(ngc.group(1)), int(ngc.group(2))))
        specs.append(_bounded("torch", bounds) + _released_by("torch", month, bool(bounds.newest or bounds.oldest)))
    elif name in ("tensorflow/tensorflow", "docker.io/tensorflow/tensorflow"):
        m = re.match(r"(\d+\.\d+(?:\.\d+)?)", tag)
        specs.append(
            f"tensorflow=={m.group(1)}"
            if m and m.group(1).count(".") == 2
            else f"tensorflow=={m.group(1)}.*"
            if m
            else "tensorflow"
        )
    elif name in ("pytorch/pytorch", "docker.io/pytorch/pytorch", "ghcr.io/pytorch/pytorch"):
        m = re.match(r"(\d+\.\d+(?:\.\d+)?)", tag)
        specs += [f"torch=={m.group(1)}" if m.group(1).count(".") == 2 else f"torch=={m.group(1)}.*"] if m else []
    elif month and "tensorflow" in last:  # merlin-tensorflow:22.12, merlin-tensorflow-training:21.09
        specs.append("tensorflow>=2" + _released_by("tensorflow", month))
    elif month and ("pytorch" in last or "torch" in last):  # merlin-pytorch:23.02
        specs.append("torch" + _released_by("torch", month).lstrip(","))
    else:
        m = re.search(r"tf2?-(?:gpu|cpu)\.(\d+)-(\d+)", image)
        if m:  # Google's deep-learning containers: tf2-gpu.2-8, tf-gpu.1-15
            specs.append(f"tensorflow=={m.group(1)}.{m.group(2)}.*")
        m = re.search(r"pytorch-(?:gpu|cpu)\.(\d+)-(\d+)", image)
        if m:
            specs.append(f"torch=={m.group(1)}.{m.group(2)}.*")
    return [r for r in map(_requirement, specs) if r is not None]


def dated_image_month(image: str) -> tuple[int, int] | None:
    """The month of a dated framework image (``nvcr.io/nvidia/pytorch:20.06-py3``, ``merlin-tensorflow:22.12``): an
    NVIDIA image or one named after its framework, with a ``YY.MM`` tag. None for any other (``ubuntu:18.04``)."""
    from mplint.knowledge import releases

    name, _, tag = image.partition(":")
    last = name.rsplit("/", 1)[-1].lower()
    if not (re.search(r"(?:^|/)nvidia[n]?/", name.lower()) or "tensorflow" in last or "torch" in last):
        return None
    return releases.image_month(tag)


def _released_by(framework: str, month: tuple[int, int] | None, comma: bool = True) -> str:
    """``,<2.12`` (TensorFlow) or ``,<=2.10.0a0`` (NVIDIA's torch): the newest version an image of ``month`` may
    hold; empty without a month. ``comma``: whether a clause comes before it."""
    from mplint.knowledge import releases

    newest = releases.newest_in_image(framework, month) if month else None
    if newest is None:
        return ""
    if framework == "torch":
        clause = f"<={newest}"
    else:
        major, minor = newest.split(".")[:2]
        clause = f"<{major}.{int(minor) + 1}"
    return f",{clause}" if comma else clause


def _substitute(text: str, values: dict[str, str]) -> str:
    """Variables expanded as a Dockerfile expands them: ``$NAME``, ``${NAME}``, ``${NAME:-default}`` and
    ``${NAME:+word}`` (the word where NAME is set), nested; an unknown one is left as written."""
    out, i = [], 0
    while i < len(text):
        if text[i] != "$":
            out.append(text[i])
            i += 1
            continue
        if text.startswith("${", i):
            depth, j = 1, i + 2
            while j < len(text) and depth:
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                j += 1
            body = text[i + 2 : j - 1] if not depth else None
            m = re.fullmatch(r"(\w+)(?::?([-+])(.*))?", body or "", re.S)
            if m is None:
                out.append(text[i:j])
            else:
                value = values.get(m.group(1))
                if m.group(2) == "+":
                    out.append(_substitute(m.group(3), values) if value else "")
                elif value:
                    out.append(value)
                elif m.group(2) == "-":
                    out.append(_substitute(m.group(3), values))
                else:
                    out.append(text[i:j])
            i = j
            continue
        m = re.match(r"\$(\w+)", text[i:])
        if m and values.get(m.group(1)):
            out.append(values[m.group(1)])
        else:
            out.append(m.group(0) if m else "$")
        i += len(m.group(0)) if m else 1
    return "".join(out)


@dataclass
class DockerStage:
    """What the stage of a Dockerfile that runs starts from and does: its image, the words of each ``pip install``
    / ``conda install`` its ``RUN`` lines make (variables substituted), and its ``COPY`` sources by destination."""

    image: str | None = None
    installs: list[tuple[str, list[str]]] = field(default_factory=list)  # (installer, argument words)
    copies: dict[str, str] = field(default_factory=dict)  # destination -> source (relative to the build context)


def dockerfile_stage(text: str) -> DockerStage:
    """The Dockerfile's last stage (the one that runs), with ``ARG``/``ENV`` values substituted and ``FROM <earlier
    stage>`` followed back to that stage's image, installs and copies."""
    text = re.sub(r"\\\r?\n", " ", text)
    values: dict[str, str] = {}
    stages: dict[str, DockerStage] = {}
    stage = DockerStage()
    for raw in text.splitlines():
        line = raw.strip()
        word = line.split(None, 1)[0].upper() if line and not line.startswith("#") else ""
        rest = line.split(None, 1)[1] if " " in line else ""
        if word in ("ARG", "ENV"):
            for m in re.finditer(r"(\w+)(?:=(\"[^\"]*\"|'[^']*'|\S*))?", rest):
                if m.group(2) is not None:
                    values[m.group(1)] = _substitute(m.group(2).strip("\"'"), values)
                elif word == "ENV" and " " in rest and "=" not in rest:  # legacy `ENV NAME value`
                    name, value = rest.split(None, 1)
                    values[name] = _substitute(value.strip(), values)
                    break
        elif word == "FROM":
            parts = [p for p in rest.split() if not p.startswith("--")]
            if not parts:
                continue
            image = _substitute(parts[0], values)
            earlier = stages.get(image.lower())
            stage = (
                DockerStage(earlier.image, list(earlier.installs), dict(earlier.copies))
                if earlier
                else DockerStage(image)
            )
            if len(parts) >= 3 and parts[1].lower() == "as":
                stages[parts[2].lower()] = stage
        elif word == "RUN":
            command = _substitute(_exec_form(rest), values)
            for m in _INSTALL.finditer(command):
                stage.installs.append((m.group(1), m.group(2).split()))
        elif word in ("COPY", "ADD"):
            parts = [_substitute(p, values) for p in _exec_form(rest).split() if not p.startswith("--")]
            for source in parts[:-1]:
                stage.copies[parts[-1].rstrip("/") or "/"] = source
    return stage


def _exec_form(rest: str) -> str:
    """``["/bin/bash", "-c", "pip install x"]`` as the command line it runs; a shell-form line as written."""
    if rest.startswith("["):
        import json

        try:
            words = json.loads(rest)
        except ValueError:
            return rest
        if isinstance(words, list):
            return " ".join(str(w) for w in words)
    return rest


def dockerfile_image(text: str) -> str | None:
    """The image the Dockerfile's last stage starts from (``dockerfile_stage``)."""
    return dockerfile_stage(text).image


def _dockerfile(path: Path) -> tuple[str | None, list[Requirement]]:
    """What the Dockerfile's image runs, and how to name it: the image's frameworks, each replaced by what a ``RUN
    pip install`` of the stage installs over it (a requirement it names, or the requirements file it installs with
    ``-r``): ``pip install tf-nightly-gpu==2.3.0.dev20200620 over ubuntu:18.04``."""
    stage = dockerfile_stage(_read(path))
    installed = _installed(stage, path.parent)
    families = {_family(r.name) for r in installed}
    from_image = _image_requirements(stage.image) if stage.image else []
    label = stage.image
    if installed:
        label = f"pip install {' '.join(str(r) for r in installed)}" + (f" over {stage.image}" if stage.image else "")
    return label, [r for r in from_image if _family(r.name) not in families] + installed


def _installed(stage: DockerStage, context: Path) -> list[Requirement]:
    found: list[Requirement] = []
    for installer, words in stage.installs:
        conda = installer in ("conda", "mamba")
        remaining = iter(words)
        for word in remaining:
            word = word.strip("\"'")
            if word in ("-r", "--requirement"):
                found += _requirements_file(_in_context(next(remaining, ""), stage, context))
            elif not word.startswith("-"):
                req = _requirement(_conda_spec(word) if conda else word)
                if req is not None and req.specifier and req.name.lower() in _FRAMEWORKS:
                    found.append(req)
    return found


def installed_folders(path: Path) -> list[Path]:
    """The local folders a Dockerfile's stage ``pip install``s (``pip install sub/``, ``pip install -e
    /workspace/sub`` after ``COPY sub /workspace/sub``): their code runs in this Dockerfile's image."""
    stage = dockerfile_stage(_read(path))
    folders = []
    for installer, words in stage.installs:
        if installer in ("conda", "mamba"):
            continue
        for word in words:
            word = word.strip("\"'")
            if word.startswith("-") or not re.match(r"[./\w]", word) or "==" in word or "://" in word:
                continue
            folder = _in_context(word, stage, path.parent)
            if folder.is_dir() and folder != path.parent:
                folders.append(folder.resolve())
    return folders


def _in_context(word: str, stage: DockerStage, context: Path) -> Path:
    """A path a ``RUN`` line names, as a path of the build context (taken to be the Dockerfile's folder):
    destinations of ``COPY`` mapped back to their sources."""
    word = word.rstrip("/")
    for destination, source in sorted(stage.copies.items(), key=lambda c: -len(c[0])):
        if word == destination or word.startswith(destination + "/"):
            word = source.rstrip("/") + word[len(destination) :]
            break
    if word.startswith("/"):
        return context / "\0"  # a path of the image, not of the context
    try:
        return (context / word).resolve()
    except (OSError, RuntimeError):
        return context / "\0"


def _family(name: str) -> str:
    name = name.lower().replace("_", "-")
    return "tensorflow" if name in _TF_PACKAGES else name


def _metadata(path: Path) -> list[Requirement]:
    """``Requires-Dist`` of a distribution's PKG-INFO or METADATA (an email-header file)."""
    from email.parser import HeaderParser

    headers = HeaderParser().parsestr(_read(path))
    return [r for r in map(_requirement, headers.get_all("Requires-Dist") or []) if r is not None]


# --- the environment a README documents: the images it names and its install commands ---------------------

_README = re.compile(r"^(?:readme|install)(?:\.(?:md|markdown|rst|txt))?$", re.I)  # INSTALL.md: install steps
_DOCUMENTED_IMAGE = re.compile(
    r"(?<![\w./-])((?:nvcr\.io/nvidia/(?:tensorflow|pytorch))|(?:(?:docker\.io|ghcr\.io)/)?"
    r"(?:tensorflow/tensorflow|pytorch/pytorch)):(\w[\w.-]*)"
)
_INSTALL = re.compile(r"\b(pip3?|python3?\s+-m\s+pip|uv\s+pip|conda|mamba)\s+install\b([^\n`|;&]*)")
_FRAMEWORKS = {"torch", "keras", "tf-keras", *_TF_PACKAGES}


def _readmes(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if _README.match(p.name) and p.is_file())
    except OSError:
        return []


def _documented(path: Path) -> list[tuple[str, list[Requirement]]]:
    """What a README says the code runs on, one entry per framework: the versioned container images it names
    (``docker image tensorflow/tensorflow:2.4.0-gpu``), the versioned framework requirements of its install
    commands (``pip install tensorflow==2.4.0``, ``conda install pytorch=1.10``). Several for one framework are
    alternatives: the range spans them all. Unversioned mentions (``pip install torch``, ``:latest``) say nothing, and
    neither does an optional source build (``git clone -b v2.1.0 .../pytorch``: "for better performance")."""
    text = _read(path)
    found: list[tuple[str, Requirement]] = []
    for m in _DOCUMENTED_IMAGE.finditer(text):
        image = f"{m.group(1)}:{m.group(2)}"
        found += [(image, r) for r in _image_requirements(image) if r.specifier]
    for m in _INSTALL.finditer(text):
        conda = m.group(1) in ("conda", "mamba")
        for word in m.group(2).split():
            word = word.strip("\"'")
            req = None if word.startswith("-") else _requirement(_conda_spec(word) if conda else word)
            if req is not None and req.specifier and req.name.lower() in _FRAMEWORKS:
                found.append((f"{m.group(1)} install {word}", req))
    families: dict[str, list[tuple[str, Requirement]]] = {}
    for what, req in found:
        name = req.name.lower()
        families.setdefault(_family(name), []).append((what, req))
    return [
        (" and ".join(dict.fromkeys(w for w, _ in items)), [_either(family, [r for _, r in items])])
        for family, items in families.items()
    ]


def _either(family: str, requirements: list[Requirement]) -> Requirement:
    """One requirement admitting every version any of ``requirements`` admits (documented alternatives)."""
    if len(requirements) == 1:
        return requirements[0]
    samples = _samples("keras" if family == "keras" else "tensorflow")
    allowed = [v for req in requirements for v in _allowed(req, samples)]
    open_above = any(
        not any(s.operator in ("<", "<=", "==", "~=", "===") for s in req.specifier) for req in requirements
    )
    low, high = min(allowed), max(allowed)
    name = requirements[0].name
    either = f"{name}>={low}" if open_above else f"{name}=={low}" if low == high else f"{name}>={low},<={high}"
    return _requirement(either) or requirements[0]


_READERS = (
    ("pyproject.toml", "_pyproject"),
    ("setup.py", "_setup_py"),
    ("setup.cfg", "_setup_cfg"),
    ("environment.yml", "_conda"),
    ("environment.yaml", "_conda"),
    ("Pipfile", "_pipfile"),
)


def _requirement_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("requirements*.txt")) + sorted(folder.glob("requirements/*.txt"))


def _metadata_files(folder: Path) -> list[Path]:
    """An unpacked sdist's PKG-INFO, an unpacked wheel's ``*.dist-info/METADATA``, an ``*.egg-info/PKG-INFO``."""
    found = [folder / "PKG-INFO"] if (folder / "PKG-INFO").is_file() else []
    return found + sorted(
        p for pattern in ("*.dist-info/METADATA", "*.egg-info/PKG-INFO") for p in folder.glob(pattern)
    )


# Subfolders whose Dockerfiles describe the folder's environment (``impl/docker/Dockerfile`` builds ``impl/``).
_DOCKER_FOLDERS = ("docker", "Docker", "dockerfiles", ".devcontainer", "container")


def _dockerfiles(folder: Path, subfolders: bool = False) -> list[Path]:
    """The folder's Dockerfiles, or (``subfolders``) those of its ``docker/``-like subfolders."""
    found = []
    for place in (folder / sub for sub in _DOCKER_FOLDERS) if subfolders else (folder,):
        try:
            found += sorted(p for p in place.iterdir() if p.is_file() and _DOCKERFILE.match(p.name))
        except OSError:
            continue
    return found


def pin_sources(
    folder: Path, parsed: dict | None = None, root: Path | None = None
) -> Iterable[tuple[str, list[Requirement]]]:
    """(file name, requirements) of each pin source in ``folder``, most specific first, and, with the project's
    ``root``, the Dockerfiles above it that ``pip install`` the folder (a sub-package installed into the image of
    its parent's Dockerfile runs in that image). ``parsed`` keeps each file's requirements for the rest of a run
    (the same folders are asked for every program)."""
    parsed = {} if parsed is None else parsed

    def read(path: Path, reader):
        return _read_once(parsed, path, reader)

    if root is not None:
        yield from _installing_dockerfiles(folder, root, read)

    for path in _requirement_files(folder):
        yield path.name if path.parent == folder else f"requirements/{path.name}", read(path, _requirements_file)
    for name, reader in _READERS:
        if (folder / name).is_file():
            yield name, read(folder / name, globals()[reader])
    for path in _metadata_files(folder):
        yield path.relative_to(folder).as_posix(), read(path, _metadata)
    for path in _dockerfiles(folder):
        image, requirements = read(path, _dockerfile)
        if image or requirements:
            yield f"{image or 'its image'} in {path.relative_to(folder).as_posix()}", requirements


def _installing_dockerfiles(folder: Path, root: Path, read) -> Iterable[tuple[str, list[Requirement]]]:
    """The Dockerfiles above ``folder`` that install it: up to the project's root, or, for a project nested in a
    repository (a sub-package with its own packaging script), up to the repository's top."""
    folder = folder.resolve()
    top = _repository_top(root) or root
    above = folder.parent
    while above.is_relative_to(top) and above != above.parent:
        for path in _dockerfiles(above):
            if folder in read(path, installed_folders):
                image, requirements = read(path, _dockerfile)
                if image or requirements:  # the file by its absolute path: readers place it in the project
                    yield f"{image or 'its image'} (installing {folder.name}/) in {path}", requirements
        if above == top:
            break
        above = above.parent


def _repository_top(folder: Path) -> Path | None:
    for above in (folder, *folder.parents):
        if (above / ".git").exists():
            return above
    return None


def documented_sources(folder: Path, parsed: dict | None = None) -> Iterable[tuple[str, list[Requirement]]]:
    """Evidence for a framework that no pin source of the folder names: the images of the Dockerfiles in its
    ``docker/``-like subfolders (an application folder's container; not where the folder packages a distribution,
    whose users install it anywhere the package admits: there it is a development image), then what the folder's
    README documents (``_documented``: "<what> in README.md")."""
    parsed = {} if parsed is None else parsed
    if not _packages_a_distribution(folder):
        for path in _dockerfiles(folder, subfolders=True):
            image, requirements = _read_once(parsed, path, _dockerfile)
            if image or requirements:
                yield f"{image or 'its image'} in {path.relative_to(folder).as_posix()}", requirements
    for path in _readmes(folder):
        for what, requirements in _read_once(parsed, path, _documented):
            yield f"{what} in {path.name}", requirements


def _read_once(parsed: dict, path: Path, reader):
    """``reader(path)``, kept in ``parsed`` for the rest of the run."""
    key = (path, reader)  # one file may be read two ways (a Dockerfile: its image, the folders it installs)
    if key not in parsed:
        parsed[key] = reader(path)
    return parsed[key]


def _packages_a_distribution(folder: Path) -> bool:
    """A packaging script or a ``pyproject.toml`` with a ``[project]`` or ``[tool.poetry]`` table."""
    from mplint.project.config import is_packaging_script

    if is_packaging_script(folder / "setup.py"):
        return True
    data = _toml(folder / "pyproject.toml") if (folder / "pyproject.toml").is_file() else {}
    return "project" in data or "poetry" in data.get("tool", {})


def pin_files(folders: Iterable[Path]) -> set[Path]:
    """Every file the pin finder may read for ``folders``: their pin sources and the files those include
    (``-r``/``-c``, at any depth). Found by name and a textual scan, so that a cache key needs no parser."""
    found: set[Path] = set()
    todo: list[Path] = []
    for folder in folders:
        todo += _requirement_files(folder) + _metadata_files(folder) + _dockerfiles(folder) + _readmes(folder)
        todo += _dockerfiles(folder, subfolders=True)
        todo += [folder / name for name, _ in _READERS if (folder / name).is_file()]
    while todo:
        path = todo.pop()
        if path in found or not path.is_file():
            continue
        found.add(path)
        if path.suffix in (".txt", ".in", ".yml", ".yaml") or path.name.startswith("requirements"):
            for include in re.findall(
                r"(?:^|\s)(?:-r|--requirement|-c|--constraint)[\s=]+([^\s#]+)", _read(path), re.M
            ):
                todo.append((path.parent / include).resolve())
    return found


# --- from requirements to a target ----------------------------------------------------------


def _allowed(req: Requirement, samples: tuple[Version, ...]) -> list[Version]:
    from packaging.specifiers import InvalidSpecifier
    from packaging.version import InvalidVersion, Version

    mentioned = []
    for spec in req.specifier:
        try:
            mentioned.append(Version(spec.version.replace(".*", ".0")))
        except (InvalidVersion, InvalidSpecifier):
            continue
    return [v for v in (*samples, *mentioned) if req.specifier.contains(v, prereleases=True)]


def _merged(found: list[tuple[Requirement, str]], names: set[str]) -> tuple[Requirement, str] | None:
    """All requirements on one package (constraints, and every source of a folder: an image and the pins beside
    it) intersected as one, and where they come from (every source that bounds it)."""
    matching = [(r, w) for r, w in found if r.name.lower().replace("_", "-") in names]
    if not matching:
        return None
    from packaging.specifiers import SpecifierSet

    specifier = SpecifierSet()
    for req, _ in matching:
        specifier &= req.specifier
    bounding = [(r, w) for r, w in matching if r.specifier] or matching[:1]
    req = bounding[0][0]
    where = " and ".join(dict.fromkeys(w if not _pinned_in(w) else f"{w} pins {r}" for r, w in bounding))
    if len(bounding) == 1:
        where = bounding[0][1]
    return Requirement(req.name, specifier, f"{req.name}{specifier}"), where


_TF1_SAMPLES = tuple(f"1.{minor}.0" for minor in range(16))


def _admitted(req: Requirement, family: str) -> list[Version]:
    """The versions ``req`` admits among the samples; TensorFlow 1 only where it admits no TensorFlow 2 (a pin
    ``tensorflow<2.8`` is a TF 2 range, ``tensorflow<2`` or a TF1 image one of TF 1)."""
    if family == "torch":
        return _allowed(req, torch_samples())
    allowed = _allowed(req, _samples("keras" if family == "keras" else "tensorflow"))
    if family == "tensorflow" and (not allowed or max(allowed).major < 2):
        from packaging.version import Version

        allowed = _allowed(req, tuple(Version(v) for v in _TF1_SAMPLES))
    return allowed


def _generation_of(found: list[tuple[Requirement, str]]) -> Generation | None:
    tf_keras = _merged(found, {"tf-keras"})
    if tf_keras:
        return Generation(2, _evidence(*tf_keras) + " (legacy Keras 2)", "pin-tf-keras")
    keras = _merged(found, {"keras"})
    if keras:
        allowed = _allowed(keras[0], _samples("keras"))
        if allowed:
            newest, oldest = (3 if v.major >= 3 else 2 for v in (max(allowed), min(allowed)))
            return Generation(newest, _evidence(*keras), "pin-keras", oldest=oldest)
    tf = _merged(found, _TF_PACKAGES)
    if tf:
        allowed = _admitted(tf[0], "tensorflow")
        if allowed:
            newest, oldest = max(allowed), min(allowed)
            tf_range = _version_range("TF", oldest, newest, newest >= max(_samples("tensorflow")))
            return Generation(
                _tf_generation(newest),
                _evidence(*tf, tf_range),
                "pin-tensorflow",
                str(newest),
                _tf_generation(oldest),
                tf_range,
            )
    return None


_CODE_EVIDENCE = re.compile(r"\S+:\d+ ")  # "utils.py:21 uses torch._six, which torch 2.0 removed"


def is_code_evidence(where: str) -> bool:
    """Whether a requirement's ``where`` is the code's own version evidence (``path:line what``)."""
    return bool(_CODE_EVIDENCE.match(where))


def is_image(where: str) -> bool:
    """Whether a requirement's ``where`` is a container image ("<image> in Dockerfile"), not a pin file or code."""
    return " in " in where and not is_code_evidence(where)


def _pinned_in(where: str) -> bool:
    """Whether ``where`` names a pin file alone (cited as "<file> pins <requirement>"): not an image, not the code's
    own evidence, not several sources together (each already cited)."""
    return not is_image(where) and not is_code_evidence(where) and " pins " not in where


def consistent(found: list[tuple[Requirement, str]], family: str) -> list[tuple[Requirement, str]]:
    """A folder's requirements on one framework, intersected; where they admit no version together (an image and a
    pin that contradict each other), what the Dockerfiles say (the image is what runs), else the first source's."""
    from packaging.specifiers import SpecifierSet

    mine = [(r, w) for r, w in found if _family(r.name) == family]
    together = SpecifierSet()
    for req, _ in mine:
        together &= req.specifier
    if len(mine) < 2 or _admitted(Requirement(family, together, family), family):
        return mine
    images = [(r, w) for r, w in mine if is_image(w)]
    return images or [(r, w) for r, w in mine if w == mine[0][1]]


def _tf_generation(version: Version) -> int:
    from packaging.version import Version

    return 0 if version < Version("2") else 1 if version < Version("2.4") else 2 if version < Version("2.16") else 3


def _version_range(name: str, oldest: Version, newest: Version, open_above: bool) -> str:
    """``TF 2.4``, ``TF 2.6-2.15``, ``TF >= 2.6``: minor versions, as release notes name them."""
    low, high = f"{oldest.major}.{oldest.minor}", f"{newest.major}.{newest.minor}"
    return f"{name} >= {low}" if open_above else f"{name} {low}" if low == high else f"{name} {low}-{high}"


def _evidence(req: Requirement, where: str, admits: str = "") -> str:
    """``requirements.txt pins tensorflow==2.8.0``; an image: ``nvcr.io/nvidia/tensorflow:21.02-tf2-py3 in Dockerfile: TF 2.4``."""
    if not _pinned_in(where) and admits:
        return f"{where}: {admits}"
    return f"{where} pins {req}"


def _folder_requirements(folder: Path, root: Path, parsed: dict | None = None) -> list[tuple[Requirement, str]]:
    """The requirements on TensorFlow/Keras the folder's pin sources state together (intersected), else those of the
    first README that documents a version; each with where it lies (relative to ``root``)."""

    def where_of(name: str) -> str:
        image, _, file = name.rpartition(" in ")  # "<image> in Dockerfile": the file is what lies in the folder
        path = folder / file  # an absolute file (a Dockerfile above that installs the folder) stays itself
        where = path.relative_to(root).as_posix() if path.is_relative_to(root) else os.path.relpath(path, root)
        return f"{image} in {where}" if image else where

    pins = [(r, where_of(name)) for name, reqs in pin_sources(folder, parsed, root) for r in reqs]
    pins = [item for family in ("tf-keras", "keras", "tensorflow") for item in consistent(pins, family)]
    if _generation_of(pins) is not None:
        return pins
    for name, reqs in documented_sources(folder, parsed):
        documented = [(r, where_of(name)) for r in reqs]
        if _generation_of(documented) is not None:
            return documented
    return []


def with_code_bounds(
    found: list[tuple[Requirement, str]], bounds: Iterable[tuple[str, str, str]]
) -> list[tuple[Requirement, str]]:
    """``found`` and the code's own version evidence ((package, specifier, where)) on one family, intersected where
    they agree; where they contradict each other the pins stand (``consistent`` keeps the first source)."""
    code = [(req, where) for package, spec, where in bounds if (req := _requirement(f"{package}{spec}")) is not None]
    code = [item for item in code if _narrows(found, item)]
    if not code:
        return found
    families = {_family(r.name) for r, _ in code}
    kept = [item for item in found if _family(item[0].name) not in families]
    return kept + [item for family in sorted(families) for item in consistent(found + code, family)]


def _narrows(found: list[tuple[Requirement, str]], bound: tuple[Requirement, str]) -> bool:
    """Whether a code bound excludes some version the requirements ``found`` admit (one that does not is no news)."""
    from packaging.specifiers import SpecifierSet

    family = _family(bound[0].name)
    together = SpecifierSet()
    for req, _ in found:
        if _family(req.name) == family:
            together &= req.specifier
    before = _admitted(Requirement(family, together, family), family)
    after = _admitted(Requirement(family, together & bound[0].specifier, family), family)
    return before != after


class PinFinder:
    """The pins nearest above a folder, up to the project root; each folder is read once per run."""

    def __init__(self, root: Path):
        self.root = root.resolve()
        self._folders: dict[Path, list[tuple[Requirement, str]]] = {}
        self.parsed: dict[Path, object] = {}  # each pin file's requirements, shared with the torch targets of the run

    def requirements_for(self, folder: Path) -> list[tuple[Requirement, str]]:
        """The TensorFlow/Keras requirements of the nearest folder at or above ``folder`` that states any."""
        folder = Path(folder).resolve()
        chain = []
        while True:
            if folder in self._folders:
                found = self._folders[folder]
                break
            chain.append(folder)
            found = _folder_requirements(folder, self.root, self.parsed)
            if found or folder == self.root or not folder.is_relative_to(self.root) or folder.parent == folder:
                break
            folder = folder.parent
        for seen in chain:
            self._folders[seen] = found
        return found

    def target_for(self, folder: Path, code: Iterable[tuple[str, str, str]] = ()) -> Generation | None:
        """The target the pins nearest ``folder`` give, intersected with the code's own version evidence."""
        return _generation_of(with_code_bounds(self.requirements_for(folder), code))

    @staticmethod
    def from_code(code: Iterable[tuple[str, str, str]]) -> Generation | None:
        """The target the code's own version evidence gives alone."""
        return _generation_of(with_code_bounds([], code))


def generation_from_pins(root: Path) -> Generation | None:
    """The pins at the project root."""
    return _generation_of(_folder_requirements(root.resolve(), root.resolve()))
