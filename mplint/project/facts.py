"""Project-level facts, computed once per run and handed to every rule.

Which policies the project sets (anywhere, not only in the file being
checked), which Keras generation it targets, whether it uses TPUs, and which
of its modules re-export Keras. Extraction uses the stdlib ``ast`` (several
times faster than a concrete syntax tree) over the files that a byte-level
pre-filter admits; each file's record is small and cacheable.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import Version

from mplint.engine.apinames import canonical

MIXED_POLICIES = frozenset({"mixed_float16", "mixed_bfloat16"})
FLOAT16_POLICIES = frozenset({"mixed_float16", "float16"})
BFLOAT16_POLICIES = frozenset({"mixed_bfloat16", "bfloat16"})
UNKNOWN_POLICY = "?"  # set from a value the linter cannot evaluate

_POLICY_SETTERS = {"set_global_policy", "set_policy", "set_dtype_policy"}
_POLICY_CLASSES = {"Policy", "DTypePolicy"}
_TPU_NAMES = {"TPUStrategy", "TPUClusterResolver", "TPUStrategyV2", "initialize_tpu_system"}
# Files without these never set a policy, use TPUs or switch Keras: imports alone are read by regex.
MAX_FACTS_BYTES = 10 * 1024 * 1024  # as the engine's MAX_SOURCE_BYTES
# (`dtype_policy` attributes, everywhere in Keras' own code, set nothing: setters and Policy(...) calls do.)
# (Nor do `floatx()` reads, or TPU in other names: only `set_floatx` and the names in _TPU_NAMES count.)
_FACT_TOKENS = re.compile(
    rb"set_(?:global_|dtype_)?policy|Policy\s*\(|set_floatx|mixed_|TPUStrategy|TPUClusterResolver|initialize_tpu_system"
    rb"|LEGACY_KERAS"
)
_IMPORT_LINE = re.compile(
    rb"^([ \t]*)(?:from[ \t]+([\w.]+)[ \t]+import[ \t]+(\([^)]*\)|[^\n#;]+)|import[ \t]+([^\n#;]+))", re.M
)


@dataclass(frozen=True)
class PolicySite:
    policy: str
    path: str
    line: int
    how: str  # config | global | object | layer | floatx


@dataclass
class FileFacts:
    """What one file contributes to the project facts."""

    path: str = ""
    policies: list[PolicySite] = field(default_factory=list)
    keras_imports: set[str] = field(default_factory=set)  # keras | tf_keras | tf.keras
    legacy_keras_env: bool = False
    tpu_lines: list[int] = field(default_factory=list)
    reexports: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Generation:
    value: int  # 1, 2 or 3
    source: str  # human-readable: where the value came from
    # config | pin-tf-keras | pin-keras | pin-tensorflow | imports | default
    origin: str = "default"

    @property
    def label(self) -> str:
        return {1: "G1 (TF 2.1-2.3 experimental API)", 2: "Keras 2", 3: "Keras 3"}[self.value]


@dataclass(frozen=True)
class ProjectFacts:
    policies: tuple[PolicySite, ...] = ()
    generation: Generation = Generation(3, "default (Keras 3, what a current TensorFlow installs)")
    tpu_sites: tuple[tuple[str, int], ...] = ()
    reexports: dict = field(default_factory=dict)
    keras_namespaces: frozenset = frozenset()
    policy_from_config: bool = False

    @functools.cached_property
    def reexported_names(self) -> dict[str, frozenset[str]]:
        """Last name of each re-export -> the parts of the Keras path it stands for (for the pre-filter)."""
        out: dict[str, frozenset[str]] = {}
        for key, target in self.reexports.items():
            last = key.rsplit(".", 1)[-1]
            out[last] = out.get(last, frozenset()) | frozenset(target.split("."))
        return out

    @property
    def policy_names(self) -> frozenset[str]:
        return frozenset(p.policy for p in self.policies)

    @property
    def global_policy_names(self) -> frozenset[str]:
        return frozenset(p.policy for p in self.policies if p.how != "layer")

    @property
    def layer_policy_names(self) -> frozenset[str]:
        return frozenset(p.policy for p in self.policies if p.how == "layer")

    @property
    def reduced_precision(self) -> bool:
        """Some code may compute in float16/bfloat16 (an unevaluable policy counts)."""
        names = self.policy_names
        return bool(names & (FLOAT16_POLICIES | BFLOAT16_POLICIES)) or UNKNOWN_POLICY in names

    @property
    def float16(self) -> bool:
        names = self.policy_names
        return bool(names & FLOAT16_POLICIES) or UNKNOWN_POLICY in names

    @property
    def bfloat16_only(self) -> bool:
        names = self.policy_names - {"float32", "float64"}
        return bool(names) and names <= BFLOAT16_POLICIES

    @property
    def uses_tpu(self) -> bool:
        return bool(self.tpu_sites)

    def describe_policy(self) -> str:
        """Where the MP context comes from, for messages."""
        mixed = [p for p in self.policies if p.policy not in ("float32", "float64")]
        if not mixed:
            return "no mixed policy"
        p = mixed[0]
        if p.how == "config":
            return f"policy {p.policy} from the mplint config"
        name = "an unevaluated policy" if p.policy == UNKNOWN_POLICY else p.policy
        return f"{name} set at {p.path}:{p.line}"


# --- per-file extraction ------------------------------------------------------------------


def _last_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _module_strings(tree: ast.Module) -> dict[str, list[str]]:
    """Module-level ``NAME = "str"`` (or conditional of strings) assignments."""
    out: dict[str, list[str]] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            values = _strings(stmt.value, {})
            if values:
                out[stmt.targets[0].id] = values
    return out


def _strings(node: ast.AST, consts: dict[str, list[str]]) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        return _strings(node.body, consts) + _strings(node.orelse, consts)
    if isinstance(node, ast.Name) and node.id in consts:
        return consts[node.id]
    if isinstance(node, ast.Call) and _last_name(node.func) in _POLICY_CLASSES and node.args:
        return _strings(node.args[0], consts)
    return []


def _policy_values(node: ast.AST, consts: dict[str, list[str]]) -> list[str]:
    return _strings(node, consts) or [UNKNOWN_POLICY]


def _module_keras_kind(module: str) -> str | None:
    root = module.split(".")[0]
    if root == "keras":
        return "keras"
    if root == "tf_keras":
        return "tf_keras"
    if module.startswith("tensorflow.keras") or module.startswith("tensorflow.compat.v2.keras"):
        return "tf.keras"
    return None


def _imports_by_regex(source: bytes, facts: FileFacts, module_name: str) -> None:
    """Module-level imports of a file that sets no policy: Keras flavour and re-exports, without parsing."""
    own_keras = bool(module_name) and canonical(module_name) is not None
    for match in _IMPORT_LINE.finditer(source):
        indent, module, names, plain = (g.decode("utf-8", "replace") if g is not None else None for g in match.groups())
        top_level = not indent  # only module-level imports are re-exported
        if module is not None:
            kind = _module_keras_kind(module)
            aliases = [a.strip() for a in names.strip("()").replace("\\\n", " ").split(",") if a.strip()]
            if module == "tensorflow" and any(a.split()[0] == "keras" for a in aliases):
                kind = "tf.keras"
            if kind:
                facts.keras_imports.add(kind)
            for alias in aliases:
                parts = alias.split()
                target = f"{module}.{parts[0]}"
                if top_level and module_name and not own_keras and parts[0] != "*" and canonical(target) is not None:
                    facts.reexports[f"{module_name}.{parts[-1]}"] = target
        else:
            for alias in plain.split(","):
                parts = alias.split()
                if not parts:
                    continue
                kind = _module_keras_kind(parts[0])
                if kind:
                    facts.keras_imports.add(kind)
                if top_level and module_name and not own_keras and canonical(parts[0]) is not None:
                    bound = parts[-1] if len(parts) == 3 and parts[1] == "as" else parts[0].split(".")[0]
                    target = parts[0] if len(parts) == 3 else parts[0].split(".")[0]
                    facts.reexports[f"{module_name}.{bound}"] = target
    if b"tf.keras" in source or b"tensorflow.keras" in source:
        facts.keras_imports.add("tf.keras")


def extract_file_facts(source: bytes, path: str, module_name: str) -> FileFacts:
    facts = FileFacts(path=path)
    if len(source) > MAX_FACTS_BYTES or not _FACT_TOKENS.search(source):
        # Huge files (skipped by the engine too) and files that set no policy: imports by regex only.
        if b"keras" in source:
            _imports_by_regex(source, facts, module_name)
        return facts
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return facts  # reported as MP000 by the file check
    consts = _module_strings(tree)
    own_keras = canonical(module_name) is not None if module_name else False
    for stmt in tree.body:  # module-level bindings other modules may import from here
        if own_keras or not module_name:
            break
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if canonical(alias.name) is not None:
                    bound = alias.asname or alias.name.split(".")[0]
                    target = alias.name if alias.asname else alias.name.split(".")[0]
                    facts.reexports[f"{module_name}.{bound}"] = target
        elif isinstance(stmt, ast.ImportFrom) and stmt.module and stmt.level == 0:
            for alias in stmt.names:
                target = f"{stmt.module}.{alias.name}"
                if alias.name != "*" and canonical(target) is not None:
                    facts.reexports[f"{module_name}.{alias.asname or alias.name}"] = target
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                kind = _module_keras_kind(alias.name)
                if kind:
                    facts.keras_imports.add(kind)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            kind = _module_keras_kind(node.module)
            if node.module == "tensorflow" and any(a.name == "keras" for a in node.names):
                kind = "tf.keras"
            if kind:
                facts.keras_imports.add(kind)
        elif isinstance(node, ast.Attribute) and node.attr == "keras":
            if isinstance(node.value, ast.Name) and node.value.id in ("tf", "tensorflow"):
                facts.keras_imports.add("tf.keras")
        elif isinstance(node, ast.Constant) and node.value == "TF_USE_LEGACY_KERAS":
            facts.legacy_keras_env = True
        elif isinstance(node, ast.Call):
            name = _last_name(node.func)
            if name in _POLICY_SETTERS and node.args:
                for value in _policy_values(node.args[0], consts):
                    facts.policies.append(PolicySite(value, path, node.lineno, "global"))
            elif name == "set_floatx" and node.args:
                for value in _strings(node.args[0], consts):
                    facts.policies.append(PolicySite(value, path, node.lineno, "floatx"))
            elif name in _POLICY_CLASSES and node.args:
                for value in _strings(node.args[0], consts):
                    facts.policies.append(PolicySite(value, path, node.lineno, "object"))
            for kw in node.keywords:
                if kw.arg == "dtype":
                    for value in _strings(kw.value, consts):
                        if value in MIXED_POLICIES:
                            facts.policies.append(PolicySite(value, path, node.lineno, "layer"))
        if isinstance(node, (ast.Name, ast.Attribute)) and _last_name(node) in _TPU_NAMES:
            facts.tpu_lines.append(node.lineno)
    return facts


# --- dependency pins ------------------------------------------------------------------------

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


# --- aggregation ----------------------------------------------------------------------------


def build_project_facts(
    file_facts: Iterable[FileFacts], root: Path, keras_setting: int | None, policy_setting: str | None
) -> ProjectFacts:
    policies: list[PolicySite] = []
    imports: set[str] = set()
    legacy_env = False
    tpu: list[tuple[str, int]] = []
    reexports: dict[str, str] = {}
    for ff in file_facts:
        policies.extend(ff.policies)
        imports |= ff.keras_imports
        legacy_env |= ff.legacy_keras_env
        tpu.extend((ff.path, line) for line in ff.tpu_lines)
        reexports.update(ff.reexports)
    if policy_setting:
        policies = [PolicySite(policy_setting, "", 0, "config")]
    return ProjectFacts(
        policies=tuple(policies),
        generation=_generation(root, keras_setting, imports, legacy_env),
        tpu_sites=tuple(tpu),
        reexports=reexports,
        keras_namespaces=frozenset(imports),
        policy_from_config=bool(policy_setting),
    )


def _generation(root: Path, keras_setting: int | None, imports: set[str], legacy_env: bool) -> Generation:
    if keras_setting:
        return Generation(keras_setting, f"keras = {keras_setting} in the mplint config", "config")
    pinned = generation_from_pins(root)
    if pinned:
        return pinned
    if "tf_keras" in imports or legacy_env:
        return Generation(2, "the code imports tf_keras / sets TF_USE_LEGACY_KERAS", "imports")
    if "keras" in imports:
        return Generation(3, "the code imports Keras 3 (`import keras`)", "imports")
    return Generation(3, "no pin or config: Keras 3, what a current TensorFlow installs (set keras = 2 to target Keras 2)")
