"""The environments images and documents describe: the image of the stage a Dockerfile runs (``ARG``/``ENV``
substituted, ``RUN pip install`` over the image, the folders it installs), NGC ``YY.MM`` tags bounded by the verified
releases of ``mplint.knowledge.ngc_images`` and every dated image by the frameworks released by its month, official
``tensorflow/tensorflow:X.Y`` and ``pytorch/pytorch:X.Y.Z-...`` tags, and what a README or INSTALL file documents (the
versioned images it names, its install commands). Parsing only, as ``mplint.project.manifests``."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from mplint.project.manifests import (
    TF_PACKAGES,
    Requirement,
    allowed_versions,
    conda_spec,
    family_of,
    parse_requirement,
    read_text,
    requirements_file,
    sample_versions,
)

_DOCKERFILE = re.compile(r"^(?:Dockerfile(?:[.-].*)?|.*\.[Dd]ockerfile)$")


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

    name, tag = split_image(image)
    last = name.rsplit("/", 1)[-1].lower()
    month = releases.image_month(tag)
    nvidia = _nvidia(name)
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
    return [r for r in map(parse_requirement, specs) if r is not None]


def split_image(image: str) -> tuple[str, str]:
    """An image reference's name and tag: ``gitlab-master.nvidia.com:5005/dl/dgx/pytorch:21.05-py3-stage`` is
    ``pytorch`` of a registry with a port, tagged ``21.05-py3-stage``; a digest (``@sha256:...``) is no tag."""
    image = image.split("@", 1)[0]
    head, slash, last = image.rpartition("/")
    name, _, tag = last.partition(":")
    return head + slash + name, tag


def _nvidia(name: str) -> bool:
    """NVIDIA's registries and namespaces (``nvcr.io/nvidia/``, ``nvcr.io/nvidian/``, an internal
    ``gitlab-master.nvidia.com`` mirror), where ``YY.MM-py3`` tags are NGC releases."""
    name = name.lower()
    return bool(re.search(r"(?:^|/)nvidian?/", name) or re.match(r"[\w.-]*nvidia\.com(?::\d+)?/", name))


def dated_image_month(image: str) -> tuple[int, int] | None:
    """The month of a dated framework image (``nvcr.io/nvidia/pytorch:20.06-py3``, ``merlin-tensorflow:22.12``): an
    NVIDIA image or one named after its framework, with a ``YY.MM`` tag. None for any other (``ubuntu:18.04``)."""
    from mplint.knowledge import releases

    name, tag = split_image(image)
    last = name.rsplit("/", 1)[-1].lower()
    if not (_nvidia(name) or "tensorflow" in last or "torch" in last):
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


def dockerfile_stage(text: str, overridden: frozenset[str] = frozenset()) -> DockerStage:
    """The Dockerfile's last stage (the one that runs), with ``ARG``/``ENV`` values substituted and ``FROM <earlier
    stage>`` followed back to that stage's image, installs and copies. An ``ARG`` in ``overridden`` (set by the
    builds that use the file) has no known value: its default is not what runs."""
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
                if word == "ARG" and m.group(1) in overridden:
                    values.pop(m.group(1), None)
                elif m.group(2) is not None:
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


_COMPOSE = re.compile(r"^(?:docker-)?compose[\w.-]*\.ya?ml$", re.I)


def compose_files(dockerfile: Path) -> list[Path]:
    """The Compose files in the Dockerfile's folder and the folders above it, up to its repository's top."""
    from mplint.project.pins import folders_up_to, repository_top

    found: list[Path] = []
    for folder in folders_up_to(dockerfile.parent, repository_top(dockerfile.parent) or dockerfile.parent):
        try:
            found += sorted(p for p in folder.iterdir() if p.is_file() and _COMPOSE.match(p.name))
        except OSError:
            pass
    return found


def build_args(dockerfile: Path) -> frozenset[str]:
    """The ``ARG``s a Compose file that builds ``dockerfile`` sets (``build: {dockerfile: ..., args: {...}}``, in
    any of its services: one extending another inherits its build): what runs is theirs, not the defaults."""
    import yaml

    names: set[str] = set()
    for path in compose_files(dockerfile):
        text = read_text(path)
        if dockerfile.name not in text and dockerfile.name != "Dockerfile":
            continue
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError:
            continue
        services = data.get("services") if isinstance(data, dict) else None
        for service in services.values() if isinstance(services, dict) else ():
            build = service.get("build") if isinstance(service, dict) else None
            args = build.get("args") if isinstance(build, dict) else None
            if isinstance(args, dict):
                names.update(str(k) for k in args)
            elif isinstance(args, list):
                names.update(str(a).split("=", 1)[0] for a in args)
    return frozenset(names)


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


def dockerfile_requirements(path: Path) -> tuple[str | None, list[Requirement]]:
    """What the Dockerfile's image runs, and how to name it: the image's frameworks, each replaced by what a ``RUN
    pip install`` of the stage installs over it (a requirement it names, or the requirements file it installs with
    ``-r``): ``pip install tf-nightly-gpu==2.3.0.dev20200620 over ubuntu:18.04``."""
    stage = dockerfile_stage(read_text(path), build_args(path))
    installed = _installed(stage, path.parent)
    families = {family_of(r.name) for r in installed}
    from_image = _image_requirements(stage.image) if stage.image else []
    label = stage.image
    if installed:
        label = f"pip install {' '.join(str(r) for r in installed)}" + (f" over {stage.image}" if stage.image else "")
    return label, [r for r in from_image if family_of(r.name) not in families] + installed


def _installed(stage: DockerStage, context: Path) -> list[Requirement]:
    found: list[Requirement] = []
    for installer, words in stage.installs:
        conda = installer in ("conda", "mamba")
        remaining = iter(words)
        for word in remaining:
            word = word.strip("\"'")
            if word in ("-r", "--requirement"):
                found += requirements_file(_in_context(next(remaining, ""), stage, context))
            elif not word.startswith("-"):
                req = parse_requirement(conda_spec(word) if conda else word)
                if req is not None and req.specifier and req.name.lower() in _FRAMEWORKS:
                    found.append(req)
    return found


def installed_folders(path: Path) -> list[Path]:
    """The local folders a Dockerfile's stage ``pip install``s (``pip install sub/``, ``pip install -e
    /workspace/sub`` after ``COPY sub /workspace/sub``): their code runs in this Dockerfile's image."""
    stage = dockerfile_stage(read_text(path))
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


# --- the environment a README documents: the images it names and its install commands ---------------------

_README = re.compile(r"^(?:readme|install)(?:\.(?:md|markdown|rst|txt))?$", re.I)  # INSTALL.md: install steps
_DOCUMENTED_IMAGE = re.compile(
    r"(?<![\w./-])((?:nvcr\.io/nvidia/(?:tensorflow|pytorch))|(?:(?:docker\.io|ghcr\.io)/)?"
    r"(?:tensorflow/tensorflow|pytorch/pytorch)):(\w[\w.-]*)"
)
_INSTALL = re.compile(r"\b(pip3?|python3?\s+-m\s+pip|uv\s+pip|conda|mamba)\s+install\b([^\n`|;&]*)")
_FRAMEWORKS = {"torch", "keras", "tf-keras", *TF_PACKAGES}


def readmes(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if _README.match(p.name) and p.is_file())
    except OSError:
        return []


def readme_requirements(path: Path) -> list[tuple[str, list[Requirement]]]:
    """What a README says the code runs on, one entry per framework: the versioned container images it names
    (``docker image tensorflow/tensorflow:2.4.0-gpu``), the versioned framework requirements of its install
    commands (``pip install tensorflow==2.4.0``, ``conda install pytorch=1.10``). Several for one framework are
    alternatives: the range spans them all. Unversioned mentions (``pip install torch``, ``:latest``) say nothing, and
    neither does an optional source build (``git clone -b v2.1.0 .../pytorch``: "for better performance")."""
    text = read_text(path)
    found: list[tuple[str, Requirement]] = []
    for m in _DOCUMENTED_IMAGE.finditer(text):
        image = f"{m.group(1)}:{m.group(2)}"
        found += [(image, r) for r in _image_requirements(image) if r.specifier]
    for m in _INSTALL.finditer(text):
        conda = m.group(1) in ("conda", "mamba")
        for word in m.group(2).split():
            word = word.strip("\"'")
            req = None if word.startswith("-") else parse_requirement(conda_spec(word) if conda else word)
            if req is not None and req.specifier and req.name.lower() in _FRAMEWORKS:
                found.append((f"{m.group(1)} install {word}", req))
    return _alternatives(found)


def _alternatives(found: list[tuple[str, Requirement]], where: str = "") -> list[tuple[str, list[Requirement]]]:
    """One entry per framework of what a document names (``where``: a suffix for each entry's description): several
    for one framework are alternatives, and the range spans them all."""
    families: dict[str, list[tuple[str, Requirement]]] = {}
    for what, req in found:
        families.setdefault(family_of(req.name), []).append((what, req))
    return [
        (" and ".join(dict.fromkeys(w for w, _ in items)) + where, [_either(family, [r for _, r in items])])
        for family, items in families.items()
    ]


def _either(family: str, requirements: list[Requirement]) -> Requirement:
    """One requirement admitting every version any of ``requirements`` admits (documented alternatives)."""
    if len(requirements) == 1:
        return requirements[0]
    samples = sample_versions("keras" if family == "keras" else "tensorflow")
    allowed = [v for req in requirements for v in allowed_versions(req, samples)]
    open_above = any(
        not any(s.operator in ("<", "<=", "==", "~=", "===") for s in req.specifier) for req in requirements
    )
    low, high = min(allowed), max(allowed)
    name = requirements[0].name
    either = f"{name}>={low}" if open_above else f"{name}=={low}" if low == high else f"{name}>={low},<={high}"
    return parse_requirement(either) or requirements[0]


# Subfolders whose Dockerfiles describe the folder's environment (``impl/docker/Dockerfile`` builds ``impl/``).
_DOCKER_FOLDERS = ("docker", "Docker", "dockerfiles", ".devcontainer", "container")


def dockerfiles(folder: Path, subfolders: bool = False) -> list[Path]:
    """The folder's Dockerfiles, or (``subfolders``) those of its ``docker/``-like subfolders."""
    found = []
    for place in (folder / sub for sub in _DOCKER_FOLDERS) if subfolders else (folder,):
        try:
            found += sorted(p for p in place.iterdir() if p.is_file() and _DOCKERFILE.match(p.name))
        except OSError:
            continue
    return found


# --- the systems a benchmark submission describes -------------------------------------------------------------------

# MLCommons' submission layout: ``<submitter>/systems/<system>.json`` names the framework its code ran on, as
# "TensorFlow 2.2.2", "tensorflow-1.15.0", "tf2.0", "PyTorch v1.5" or "PyTorch NVIDIA Release 21.05" (an NGC image).
_SYSTEM_VERSION = re.compile(r"(?i)\b(tensorflow|tf|pytorch|torch)[\s_-]*v?(\d+\.\d+(?:\.\d+)?)")
_SYSTEM_RELEASE = re.compile(r"(?i)\b(tensorflow|pytorch)\b.*?\brelease\s+(\d{2}\.\d{2})\b")


def system_files(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in (folder / "systems").glob("*.json") if p.is_file())
    except OSError:
        return []


def system_requirements(path: Path) -> list[tuple[str, list[Requirement]]]:
    """What a submission's system description says its code ran on: the versioned framework of its ``framework``
    field, or the NGC image of its "NVIDIA Release YY.MM". Nothing for a framework named without a version."""
    import json

    try:
        described = json.loads(read_text(path))
    except ValueError:
        return []
    framework = next((v for k, v in described.items() if k.strip().lower() == "framework"), None)
    if not isinstance(framework, str):
        return []
    release = _SYSTEM_RELEASE.search(framework)
    if release:
        image = f"nvcr.io/nvidia/{release.group(1).lower()}:{release.group(2)}-py3"
        requirements = [r for r in _image_requirements(image) if r.specifier]
        return [(f'"{framework.strip()}"', requirements)] if requirements else []
    version = _SYSTEM_VERSION.search(framework)
    if not version:
        return []
    name = "torch" if version.group(1).lower() in ("pytorch", "torch") else "tensorflow"
    requirement = parse_requirement(f"{name}=={version.group(2)}.*")
    return [(f'"{framework.strip()}"', [requirement])] if requirement else []


def systems_requirements(folder: Path, read) -> list[tuple[str, list[Requirement]]]:
    """Every system description of ``folder/systems/`` together, one entry per framework: the systems a
    submission ran on are alternatives, and the range spans them all."""
    found = [
        (what, req) for path in system_files(folder) for what, reqs in read(path, system_requirements) for req in reqs
    ]
    return _alternatives(found, " in systems/*.json")
