"""What one file contributes to the project model, read from CPython's ``ast`` (fast, cacheable).

Its imports and the names it uses (for the import graph), whether it is an entry point,
the policy sites it holds (with the function they sit in, so that a helper sets a policy
only for programs that call it), TPU use, Keras flavour and re-exports.
"""

from __future__ import annotations

import ast
import bisect
import itertools
import re
from dataclasses import dataclass, field, replace

from mplint.engine.imports import callee_name, import_bindings
from mplint.engine.imports import dotted_name as _dotted
from mplint.engine.python_tree import parse_python
from mplint.engine.summaries import CHILD_FIELDS, Summary, child_fields, declared, own_nodes, walk
from mplint.knowledge.apinames import canonical, keras_namespace
from mplint.knowledge.code_versions import bound_of
from mplint.knowledge.policies import FLOATX_SETTER, MIXED_POLICIES, POLICY_CLASS_NAMES, SETTER_NAMES, UNKNOWN_POLICY
from mplint.knowledge.trainer_versions import CONFIGURING, configuring
from mplint.project.generation import legacy_keras_value
from mplint.project.run_order import run_lines, setter_line

MAX_FACTS_BYTES = 10 * 1024 * 1024  # as the engine's MAX_SOURCE_BYTES
_TPU_NAMES = {"TPUStrategy", "TPUClusterResolver", "TPUStrategyV2", "initialize_tpu_system"}
HERE = "<here>"  # a sys.path entry relative to the file's own folder
# Calls that load a module by name or path: importlib's, runpy's, imp's and the builtin ``__import__``.
_MODULE_LOADERS = frozenset(
    {"import_module", "__import__", "spec_from_file_location", "run_path", "run_module", "load_source"}
)


# Files without these set no policy, use no TPU, touch no sys.path or TF_USE_LEGACY_KERAS, load no module by
# name and reach tf.keras only through imports: their statements are read, not every expression (most files).
_FACT_TOKENS = re.compile(
    rb"set_(?:global_|dtype_)?policy|Policy|set_floatx|mixed_|TPU|initialize_tpu_system|LEGACY_KERAS|sys\.path|\.keras\b"
    rb"|__path__|Session\b|estimator|contrib|train\.\w*Optimizer|disable_v2_behavior|\.compile\(|\.fit\("
    rb"|_six\b|autocast|amp\.(?:GradScaler|custom_)|precision\s*=|[bf][fp]16\s*=|param_dtype|"
    + b"|".join(name.encode() for name in sorted(_MODULE_LOADERS))
)
_TRAINING_CALLS = frozenset({"compile", "fit"})
# TF1 constructs, by canonical prefix: the program is TF1 (G0) unless it also sets a Keras policy.
_TF1_PREFIXES = (
    "tensorflow.Session",
    "tensorflow.compat.v1.Session",
    "tensorflow.estimator",
    "tensorflow.compat.v1.estimator",
    "tensorflow.contrib",
    "tensorflow.compat.v1.disable_v2_behavior",
    "tensorflow.compat.v1.train.",
    "tensorflow.train.",
    "tensorflow.compat.v1.placeholder",
    "tensorflow.placeholder",
)
_TF1_OPTIMIZER_SUFFIX = "Optimizer"
_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "AttributeError", "Exception"}


@dataclass(frozen=True)
class PolicySite:
    policy: str
    path: str
    line: int
    how: str  # config | global | layer | floatx
    api: str = ""  # the callee as written, import aliases resolved (checked against re-exports later)
    function: str = ""  # the enclosing top-level function or Class.method; "" at module level
    cell: int | None = None  # in a notebook: the cell, and the line in that cell (``line`` is the joined cells')
    cell_line: int = 0
    # The line of the top-level statement at which a setter first runs (``run_order``): it governs only layers
    # built by later statements of its file. None where that cannot be told, and for layer dtypes.
    runs_at: int | None = None

    def where(self) -> str:
        """``path:line`` as users find it: ``guide.ipynb:cell 3:2`` in a notebook."""
        return f"{self.path}:cell {self.cell}:{self.cell_line}" if self.cell is not None else f"{self.path}:{self.line}"


@dataclass(frozen=True)
class ImportRecord:
    module: str  # as written, without the leading dots ("" in `from . import x`)
    name: str  # the imported name of `from m import name`; "" for `import m`
    bound: str  # the local name bound ("*" for a star import)
    level: int  # leading dots
    line: int


@dataclass
class FileFacts:
    """What one file contributes to the project facts."""

    path: str = ""
    policies: list[PolicySite] = field(default_factory=list)
    keras_imports: set[str] = field(default_factory=set)  # keras | tf_keras | tf.keras
    legacy_keras_env: bool = False  # sets TF_USE_LEGACY_KERAS to a true value
    tpu_lines: list[int] = field(default_factory=list)
    reexports: dict[str, str] = field(default_factory=dict)
    imports: list[ImportRecord] = field(default_factory=list)
    uses: list[str] = field(default_factory=list)  # names read and attributes accessed (sorted)
    defines: list[str] = field(default_factory=list)  # module-level names bound other than by import
    # module-level names bound to another name or its attribute, as written: re-exports by assignment
    # (``get_loss_scale = _performance.get_loss_scale``)
    aliases: dict[str, str] = field(default_factory=dict)
    main_guard: bool = False  # has `if __name__ == "__main__":`
    top_level_work: bool = False  # calls, loops or `with` blocks at module level
    sys_paths: list[str] = field(default_factory=list)  # constant sys.path entries (HERE-relative or absolute)
    # Loads modules by a name or path computed at run time (``importlib.import_module(prefix + name)``, a plugin
    # folder's ``spec_from_file_location``): any module of the project may be one it loads.
    loads_modules: bool = False
    # A package's own search path where its ``__init__`` extends ``__path__`` (Keras' generated ``api`` folder), in
    # order, HERE standing for the package folder: ``__path__.append(join(dirname(__file__), "api"))`` gives
    # [HERE, HERE/api]. Empty: the package folder alone.
    package_path: list[str] = field(default_factory=list)
    tf1: bool = False  # TF1 sessions, Estimators, tf.train optimizers, tf.contrib, disable_v2_behavior
    # The code's own version evidence (``mplint.knowledge.code_versions``): (package, specifier, what, line) of each
    # name whose unconditional use bounds the versions it runs on (``from torch._six import inf``: torch < 2.0).
    version_bounds: list[tuple[str, str, str, int]] = field(default_factory=list)
    # Trainer precision settings (``knowledge.trainer_versions.CONFIGURING``): (stack, class, "keyword=value, ..."
    # as written, line) of each configuring call that passes a precision keyword, for ``--show-facts``.
    trainer_settings: list[tuple[str, str, str, int]] = field(default_factory=list)
    # Module-level functions and methods without a decorator (``f``, ``Class.method``), each with the names its body
    # reads; and the names the rest of the module reads. A function that only uncalled functions name is never called
    # either, and version rules do not report its code (``programs.uncalled_functions``).
    functions: dict[str, list[str]] = field(default_factory=dict)
    outside_uses: list[str] = field(default_factory=list)
    # Top-level classes deriving from another class: a framework calls their methods by its own names (``forward``
    # through ``__call__``, Keras' ``call``), so any method of one that is instantiated may run.
    subclasses: list[str] = field(default_factory=list)
    trains: list[str] = field(default_factory=list)  # callables whose result this file compiles or fits (`Net`)
    # Top-level functions -> the line of the last top-level statement that may run them (``run_order``); a
    # function without an entry may run anywhere.
    run_lines: dict[str, int] = field(default_factory=dict)
    # Summaries of functions and classes that callers in other modules need: name -> kind -> summary. The kinds,
    # and what each summary's fields say, are declared by the rules that read them (``mplint.engine.summaries``).
    summaries: dict[str, dict[str, Summary]] = field(default_factory=dict)
    # CPython parsed the file: its check needs no parse of its own to report syntax errors when no rule's byte
    # trigger is in it (False in entries cached before the field existed: those files are parsed again).
    parses: bool = False


def _is_main_guard(stmt: ast.stmt) -> bool:
    if not isinstance(stmt, ast.If) or not isinstance(stmt.test, ast.Compare):
        return False
    sides = [stmt.test.left, *stmt.test.comparators]
    return any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides) and any(
        isinstance(s, ast.Constant) and s.value == "__main__" for s in sides
    )


# Module-level calls that library modules make too: they do no work of a program.
_DECLARATIONS = frozenset(
    {
        "getLogger",
        "get_logger",
        "namedtuple",
        "NamedTuple",
        "TypeVar",
        "NewType",
        "compile",
        "partial",
        "field",
        "dataclass",
        "register",
        "register_keras_serializable",
        "export",
        "keras_export",
        "tf_export",
        "LazyLoader",
        "DEFINE_string",
        "DEFINE_integer",
        "DEFINE_float",
        "DEFINE_bool",
        "DEFINE_boolean",
        "DEFINE_enum",
        "DEFINE_list",
        "DEFINE_multi_string",
        "declare_key_flag",
        "filterwarnings",
        "simplefilter",
        "getenv",
        "get",
        "frozenset",
        "set",
        "object",
        "dict",
        "list",
        "tuple",
        "Enum",
        "deprecation",
        "external_configurable",
        "configurable",
    }
)


def _does_work(stmt: ast.stmt) -> bool:
    """A module-level statement that runs something when the file is executed (`model = build()`, `fit(...)`)."""
    if isinstance(stmt, ast.Expr):
        return (
            isinstance(stmt.value, ast.Await)
            or isinstance(stmt.value, ast.Call)
            and callee_name(stmt.value) not in _DECLARATIONS
        )
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and isinstance(stmt.value, ast.Call):
        return callee_name(stmt.value) not in _DECLARATIONS
    if isinstance(stmt, (ast.With, ast.AsyncWith, ast.For, ast.AsyncFor, ast.While)):
        return True
    if isinstance(stmt, (ast.If, ast.Try)):
        blocks = [stmt.body, stmt.orelse] + (
            [h.body for h in stmt.handlers] + [stmt.finalbody] if isinstance(stmt, ast.Try) else []
        )
        return any(_does_work(s) for block in blocks for s in block)
    return False


class _FastVisitor(ast.NodeVisitor):
    """``ast.NodeVisitor`` with its methods looked up once per node type and the singleton fields skipped
    (none of its subclasses visits an operator or a context)."""

    _methods: dict[tuple[type, type], object] = {}

    def visit(self, node: ast.AST) -> None:
        key = (type(self), type(node))
        method = self._methods.get(key, False)
        if method is False:
            method = getattr(type(self), "visit_" + type(node).__name__, None)
            if method is ast.NodeVisitor.visit_Constant:
                method = None  # only tells apart the deprecated visit_Num & co, which no subclass has
            self._methods[key] = method
        if method is None:
            self.generic_visit(node)
        else:
            method(self, node)

    def generic_visit(self, node: ast.AST) -> None:
        node_type = ast.AST
        for name in CHILD_FIELDS.get(type(node)) or child_fields(type(node)):
            value = getattr(node, name, None)
            if type(value) is list:
                for item in value:
                    if isinstance(item, node_type):
                        self.visit(item)
            elif isinstance(value, node_type):
                self.visit(value)


class _Reader(_FastVisitor):
    def __init__(self, facts: FileFacts):
        self.facts = facts
        self.aliases: dict[str, str] = {}  # local name -> dotted import path
        self.consts: dict[str, list[str]] = {}  # module-level NAME = "string" (or a conditional of strings)
        self.function: list[str] = []
        self.optional = 0  # inside `try: import ... except ImportError`: a compatibility import, not a choice
        self.conditional = 0  # inside an `if`, a conditional expression or a `try`: it may not run
        self.made_by: dict[str, str] = {}  # variable -> last name of the callable whose result it holds
        self.uses: set[str] = set()  # names read and attributes accessed, on the full visit (``_used_names``)

    # --- names -------------------------------------------------------------------------
    def qualified(self, node: ast.AST) -> str | None:
        dotted = _dotted(node)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        base = self.aliases.get(head)
        if base is None:
            return dotted
        return f"{base}.{rest}" if rest else base

    def strings(self, node: ast.AST) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.IfExp):
            return self.strings(node.body) + self.strings(node.orelse)
        if isinstance(node, ast.Name) and node.id in self.consts:
            return self.consts[node.id]
        if isinstance(node, ast.Call) and node.args:
            callee = self.qualified(node.func) or ""
            if callee.rsplit(".", 1)[-1] in POLICY_CLASS_NAMES:
                return self.strings(node.args[0])
        return []

    # --- imports -----------------------------------------------------------------------
    def _version_evidence(self, qualified: str | None, line: int) -> None:
        """A use that surely runs of a name that bounds the versions (``code_versions``)."""
        if not qualified or self.optional or self.conditional:
            return
        found = bound_of(qualified)
        if found is not None and not any(b[:2] == found[:2] for b in self.facts.version_bounds):
            self.facts.version_bounds.append((found.package, found.specifier, found.what, line))

    def visit_If(self, node: ast.If) -> None:
        self.visit(node.test)
        self.conditional += 1
        for stmt in (*node.body, *node.orelse):
            self.visit(stmt)
        self.conditional -= 1

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self.conditional += 1
        self.generic_visit(node)
        self.conditional -= 1

    def visit_Import(self, node: ast.Import) -> None:
        for alias, (bound, path) in zip(node.names, import_bindings((a.name, a.asname) for a in node.names)):
            self.aliases[bound] = path
            self.facts.imports.append(ImportRecord(alias.name, "", bound, 0, node.lineno))
            self._version_evidence(alias.name, node.lineno)
            kind = keras_namespace(alias.name)
            if kind and not self.optional:
                self.facts.keras_imports.add(kind)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level == 0:  # relative imports name project modules, which the import graph follows
            self.aliases.update(import_bindings(((a.name, a.asname) for a in node.names), 0, module))
        for alias in node.names:
            bound = alias.asname or alias.name
            self.facts.imports.append(
                ImportRecord(module, alias.name, bound if alias.name != "*" else "*", node.level, node.lineno)
            )
            if node.level == 0:
                self._version_evidence(f"{module}.{alias.name}" if alias.name != "*" else module, node.lineno)
        if node.level == 0:
            kind = keras_namespace(module)
            if module == "tensorflow" and any(a.name == "keras" for a in node.names):
                kind = "tf.keras"
            if kind and not self.optional:
                self.facts.keras_imports.add(kind)

    def visit_Try(self, node: ast.Try) -> None:
        guarded = any(_handler_names(h) & _IMPORT_ERRORS for h in node.handlers)
        self.optional += guarded
        self.conditional += bool(node.handlers)
        for stmt in node.body:
            self.visit(stmt)
        self.optional -= guarded
        for part in (*node.handlers, *node.orelse):
            self.visit(part)
        self.conditional -= bool(node.handlers)
        for part in node.finalbody:
            self.visit(part)

    def visit_imports(self, body: list[ast.stmt]) -> None:
        """The imports among ``body`` and the statements nested in it, expressions left unread."""
        for stmt in body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                self.visit(stmt)
                continue
            guarded = isinstance(stmt, ast.Try) and any(_handler_names(h) & _IMPORT_ERRORS for h in stmt.handlers)
            branching = (
                isinstance(stmt, (ast.If, ast.Try, ast.Match))
                and not isinstance(stmt, ast.Try)
                or bool(getattr(stmt, "handlers", None))
            )
            self.optional += guarded
            self.conditional += branching
            self.visit_imports(getattr(stmt, "body", []))
            self.optional -= guarded
            self.visit_imports(getattr(stmt, "orelse", []))
            for handler in getattr(stmt, "handlers", []):
                self.visit_imports(handler.body)
            for case in getattr(stmt, "cases", []):
                self.visit_imports(case.body)
            self.conditional -= branching
            self.visit_imports(getattr(stmt, "finalbody", []))

    # --- scopes ------------------------------------------------------------------------
    def _enter(self, node, name: str) -> None:
        self.function.append(name)
        self.generic_visit(node)
        self.function.pop()

    def visit_FunctionDef(self, node) -> None:
        outer = self.function[-1] if self.function else ""
        # Methods are named Class.method; nested functions belong to their top-level function.
        self._enter(
            node, f"{outer}.{node.name}" if outer and outer[0].isupper() and "." not in outer else outer or node.name
        )

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._enter(node, self.function[-1] if self.function else node.name)

    def visit_Name(self, node: ast.Name) -> None:
        self.uses.add(node.id)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.uses.add(node.attr)
        self._version_evidence(self.qualified(node), node.lineno)
        if (
            node.attr == "keras"
            and isinstance(node.value, ast.Name)
            and self.aliases.get(node.value.id, node.value.id) == "tensorflow"
        ):
            self.facts.keras_imports.add("tf.keras")
        if node.attr in _TPU_NAMES:
            self.facts.tpu_lines.append(node.lineno)
        self.generic_visit(node)

    # --- calls -------------------------------------------------------------------------
    def _training(self, node: ast.Call) -> None:
        """`model = Net(...); model.compile(...)` or `build().fit(...)`: Net and build are trained here."""
        func = node.func
        if not (isinstance(func, ast.Attribute) and func.attr in _TRAINING_CALLS):
            return
        made = func.value
        # a variable holding a call's result names the callable; an imported model names itself
        name = (
            self.made_by.get(made.id, made.id)
            if isinstance(made, ast.Name)
            else callee_name(made)
            if isinstance(made, ast.Call)
            else None
        )
        if name and name not in self.facts.trains:
            self.facts.trains.append(name)

    def visit_Call(self, node: ast.Call) -> None:
        self._training(node)
        callee = self.qualified(node.func)
        if callee and (configured := configuring(callee)) is not None:
            stack, kind = configured
            read = [f"{k.arg}={ast.unparse(k.value)}" for k in node.keywords if k.arg in CONFIGURING[stack][2]]
            if read:
                self.facts.trainer_settings.append((stack, kind, ", ".join(read), node.lineno))
        last = callee.rsplit(".", 1)[-1] if callee else None
        site = self.facts.policies
        where = self.function[-1] if self.function else ""
        path = self.facts.path
        if last in SETTER_NAMES and node.args:
            for value in self.strings(node.args[0]) or [UNKNOWN_POLICY]:
                site.append(PolicySite(value, path, node.lineno, "global", callee, where))
        elif last == FLOATX_SETTER and node.args:
            for value in self.strings(node.args[0]):
                site.append(PolicySite(value, path, node.lineno, "floatx", callee, where))
        for kw in node.keywords:
            if kw.arg == "dtype":
                for value in self.strings(kw.value):
                    if value in MIXED_POLICIES:
                        site.append(PolicySite(value, path, node.lineno, "layer", callee or "", where))
        self._legacy_keras_env(node, callee or "")
        if callee and (
            callee.startswith(_TF1_PREFIXES[:-4])
            or callee.startswith(("tensorflow.train.", "tensorflow.compat.v1.train."))
            and callee.endswith(_TF1_OPTIMIZER_SUFFIX)
            or callee.startswith(_TF1_PREFIXES[-2:])
        ):
            self.facts.tf1 = True
        self._sys_path(node, callee or "")
        self._package_path(node, callee or "")
        if (callee or "").rsplit(".", 1)[-1] in _MODULE_LOADERS and node.args and _constant(node.args[0]) is None:
            self.facts.loads_modules = True
        if isinstance(node.func, ast.Name) and node.func.id in _TPU_NAMES:
            self.facts.tpu_lines.append(node.lineno)
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            values = self.strings(node.value)  # `policy = Policy("mixed_float16")` inside a function
            if values:
                self.consts[node.targets[0].id] = values
            if isinstance(node.value, ast.Call) and callee_name(node.value):
                self.made_by[node.targets[0].id] = callee_name(node.value)
        elif (
            len(node.targets) == 1
            and isinstance(node.targets[0], ast.Tuple)
            and isinstance(node.value, ast.Call)
            and callee_name(node.value)
        ):  # `model, core = build()`: builders that return the model and parts
            for element in node.targets[0].elts:
                if isinstance(element, ast.Name):
                    self.made_by[element.id] = callee_name(node.value)
        # os.environ["TF_USE_LEGACY_KERAS"] = "1"
        for target in node.targets:
            if isinstance(target, ast.Subscript) and _constant(target.slice) == "TF_USE_LEGACY_KERAS":
                if isinstance(_constant(node.value), str) and legacy_keras_value(_constant(node.value)):
                    self.facts.legacy_keras_env = True
        self.generic_visit(node)

    def _legacy_keras_env(self, node: ast.Call, callee: str) -> None:
        # os.environ.setdefault("TF_USE_LEGACY_KERAS", "1"), os.putenv(...), os.environ.update(...)
        if (
            len(node.args) >= 2
            and _constant(node.args[0]) == "TF_USE_LEGACY_KERAS"
            and isinstance(_constant(node.args[1]), str)
            and legacy_keras_value(_constant(node.args[1]))
        ):
            self.facts.legacy_keras_env = True

    def _sys_path(self, node: ast.Call, callee: str) -> None:
        if callee not in ("sys.path.insert", "sys.path.append") or not node.args:
            return
        entry = _path_value(node.args[-1], self.qualified)
        if entry is not None:
            self.facts.sys_paths.append(entry)

    def _package_path(self, node: ast.Call, callee: str) -> None:
        """``__path__.append(p)``, ``__path__.insert(i, p)``, ``__path__.extend([p, ...])`` at module level."""
        head, _, method = callee.partition(".")
        if head != "__path__" or self.function or not node.args or method not in ("append", "insert", "extend"):
            return
        values = (
            node.args[-1].elts
            if method == "extend" and isinstance(node.args[-1], (ast.List, ast.Tuple))
            else [node.args[-1]]
        )
        entries = [_path_value(v, self.qualified) for v in values]
        if not all(e and (e.startswith(HERE) or e.startswith("/")) for e in entries):
            return  # a relative entry is relative to the working directory: unknown here
        path = self.facts.package_path or [HERE]
        index = _constant(node.args[0]) if method == "insert" and len(node.args) == 2 else len(path)
        if isinstance(index, int):
            path[index:index] = entries
            self.facts.package_path = path


def _follow_trained(tree: ast.Module, trains: list[str], made_by: dict[str, str]) -> None:
    """What this file trains through its own functions: a trained parameter (``def run(model_fn): model, _ =
    model_fn(); model.fit(...)``) trains what the file's calls pass for it (``run(model_fn=_get_model)``), and a
    trained function of the file trains what it returns (``def _get_model(): return build_classifier(...)``)."""
    functions: dict[str, list[ast.FunctionDef]] = {}
    calls: dict[str, list[ast.Call]] = {}
    for node in walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions.setdefault(node.name, []).append(node)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            calls.setdefault(node.func.id, []).append(node)
    seen = set(trains)
    queue = list(trains)
    while queue and len(seen) < 64:
        name = queue.pop()
        found: list[str] = []
        for owner, definitions in functions.items():
            for function in definitions:
                positional = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
                if name not in positional and name not in {a.arg for a in function.args.kwonlyargs}:
                    continue
                for call in calls.get(owner, ()):
                    passed = next((k.value for k in call.keywords if k.arg == name), None)
                    if passed is None and name in positional and positional.index(name) < len(call.args):
                        passed = call.args[positional.index(name)]
                    if isinstance(passed, ast.Name):
                        found.append(passed.id)
        for function in functions.get(name, ()):
            for node in own_nodes(function):
                value = node.value if isinstance(node, ast.Return) else None
                if isinstance(value, ast.Tuple) and value.elts:
                    value = value.elts[0]  # `return model, core_model`
                if isinstance(value, ast.Call) and callee_name(value):
                    found.append(callee_name(value))
                elif isinstance(value, ast.Name) and value.id in made_by:
                    found.append(made_by[value.id])
        for new in found:
            if new not in seen:
                seen.add(new)
                queue.append(new)
                trains.append(new)


def _handler_names(handler: ast.ExceptHandler) -> set[str]:
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type] if handler.type else []
    return {k.id if isinstance(k, ast.Name) else k.attr if isinstance(k, ast.Attribute) else "" for k in kinds} or {
        "Exception"
    }


def _constant(node: ast.AST):
    return node.value if isinstance(node, ast.Constant) else None


def _path_value(node: ast.AST, qualified) -> str | None:
    """A constant path, with ``os.path.dirname(__file__)``/``Path(__file__).parent`` as HERE."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Call):
        callee = qualified(node.func) or ""
        last = callee.rsplit(".", 1)[-1]
        args = [_path_value(a, qualified) for a in node.args]
        if last in ("abspath", "realpath", "normpath", "str", "Path", "resolve") and len(args) == 1:
            return args[0]
        if last == "dirname" and len(args) == 1 and args[0] is not None:
            return HERE if args[0] == "__file__" else f"{args[0]}/.."
        if last == "join" and args and all(a is not None for a in args):
            return "/".join(args)
    if isinstance(node, ast.Name) and node.id == "__file__":
        return "__file__"
    if isinstance(node, ast.Attribute) and node.attr == "parent":
        inner = _path_value(node.value, qualified)
        if inner is not None:
            return HERE if inner == "__file__" else f"{inner}/.."
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        left, right = _path_value(node.left, qualified), _path_value(node.right, qualified)
        if left is not None and right is not None:
            return f"{left}/{right}"
    return None


def _module_strings(tree: ast.Module, reader: _Reader) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            values = reader.strings(stmt.value)
            if values:
                out[stmt.targets[0].id] = values
    return out


def _aliases(tree: ast.Module) -> dict[str, str]:
    """``name = other`` and ``name = module.attr`` at the top level of the file, bound once."""
    found: dict[str, str] = {}
    bound: dict[str, int] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    bound[target.id] = bound.get(target.id, 0) + 1
            if len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                value, parts = stmt.value, []
                while isinstance(value, ast.Attribute):
                    parts.insert(0, value.attr)
                    value = value.value
                if isinstance(value, ast.Name) and len(parts) <= 1:
                    found[stmt.targets[0].id] = ".".join([value.id, *parts])
    return {name: value for name, value in found.items() if bound[name] == 1}


def _used_names_skipping(tree: ast.AST, skip: set[int]) -> set[str]:
    uses: set[str] = set()
    stack: list = [tree]
    while stack:
        node = stack.pop()
        if id(node) in skip:
            continue
        if isinstance(node, ast.Name):
            uses.add(node.id)
            continue
        if isinstance(node, ast.Attribute):
            uses.add(node.attr)
        stack.extend(ast.iter_child_nodes(node))
    return uses


def _plain_functions(tree: ast.Module) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    """Top-level functions and the methods of top-level classes that no decorator registers, by qualified name."""
    out: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and not stmt.decorator_list:
            out.setdefault(stmt.name, stmt)
        elif isinstance(stmt, ast.ClassDef) and not stmt.decorator_list:
            for item in stmt.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and not item.decorator_list:
                    out.setdefault(f"{stmt.name}.{item.name}", item)
    return out


def _defined_names(tree: ast.Module) -> list[str]:
    names: set[str] = set()

    def bind(stmts) -> None:
        for stmt in stmts:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(stmt.name)
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for target in stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]:
                    for node in walk(target):
                        if isinstance(node, ast.Name):
                            names.add(node.id)
            elif isinstance(stmt, (ast.If, ast.Try, ast.With)):
                bind(stmt.body)
                bind(getattr(stmt, "orelse", []))
                for handler in getattr(stmt, "handlers", []):
                    bind(handler.body)

    bind(tree.body)
    return sorted(names)


_KERAS_ROOTS = frozenset({"keras", "tf_keras", "tensorflow.keras"})


def _module_level_imports(body: list[ast.stmt], conditional: bool = False, out: dict | None = None) -> dict[int, bool]:
    """Line of each module-level import statement -> whether it sits under an ``if``/``try`` (a version test:
    ``if keras_3(): import keras``). Imports inside functions and classes bind no name of the module."""
    out = {} if out is None else out
    for stmt in body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            out[stmt.lineno] = conditional
        elif isinstance(stmt, (ast.If, ast.Try, ast.With)):
            for block in (
                stmt.body,
                getattr(stmt, "orelse", []),
                getattr(stmt, "finalbody", []),
                *(h.body for h in getattr(stmt, "handlers", [])),
            ):
                _module_level_imports(block, conditional or not isinstance(stmt, ast.With), out)
    return out


def _reexports(records: list[ImportRecord], module_name: str, conditional: dict[int, bool]) -> dict[str, str]:
    """Module-level imports of Keras that other project modules may import from here. Under a version test the
    first arm's binding is kept (``import keras`` before ``from tensorflow import keras``); a backend shim that
    star-imports Keras (``from keras import *``) stands for Keras itself."""
    out: dict[str, str] = {}
    if not module_name or canonical(module_name) is not None:
        return out
    for record in records:
        if record.level or record.line not in conditional:
            continue
        if record.bound == "*":
            if record.module in _KERAS_ROOTS:
                out.setdefault(module_name, record.module)
            continue
        target = (
            f"{record.module}.{record.name}"
            if record.name
            else (record.module if record.bound != record.module.split(".")[0] else record.bound)
        )
        if canonical(target) is not None:
            key = f"{module_name}.{record.bound}"
            if not conditional[record.line] or key not in out:
                out[key] = target
    return out


def _used_names(tree: ast.AST, skip: set[int] | None = None, body_only: bool = False) -> set[str]:
    """Names read and attributes accessed anywhere (what an import of this module may lead to): the files
    that get no full visit (``_FACT_TOKENS``) walk for these alone, so the loop is as tight as it gets (no
    list of every node; a name ends its branch, constants and other leaves are never opened). ``skip``: nodes
    (by id) left out with everything below them; ``body_only``: a function's body alone (not its signature)."""
    if skip:
        return _used_names_skipping(tree, skip)
    uses: set[str] = set()
    add = uses.add
    stack: list = list(tree.body) if body_only else [tree]
    pop, push, extend = stack.pop, stack.append, stack.extend
    name, attribute, fields_of = ast.Name, ast.Attribute, _USE_FIELDS
    while stack:
        node = pop()
        kind = type(node)
        if kind is name:
            add(node.id)
        elif kind is attribute:
            add(node.attr)
            push(node.value)
        else:
            fields = fields_of.get(kind)
            if fields is None:
                fields = _use_fields(kind)
            for field in fields:
                value = getattr(node, field, None)
                if type(value) is list:
                    extend(value)
                elif value is not None:
                    push(value)
    return uses


# Per node type, the fields that may hold a Name or an Attribute below them: none for leaves (constants,
# strings of ``global`` and of import aliases, None in a dict's keys), the singletons skipped.
_USE_FIELDS: dict[type, tuple[str, ...]] = {str: (), type(None): (), ast.Constant: (), ast.alias: ()}


def _use_fields(kind: type) -> tuple[str, ...]:
    fields = _USE_FIELDS[kind] = child_fields(kind) if issubclass(kind, ast.AST) else ()
    return fields


def _summaries(tree: ast.Module, source: bytes, facts: FileFacts) -> None:
    """The file's function summaries (``FileFacts.summaries``) of every kind the rules declare
    (``mplint.engine.summaries``). A kind whose words must appear in the function itself only reads the top-level
    functions and classes whose text has them."""
    definitions = [s for s in tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    spans: list[tuple[int, int]] | None = None
    for kind in declared():
        found = [[m.start() for m in w.finditer(source)] if isinstance(w, re.Pattern) else w for w in kind.words]
        if not all(f if isinstance(f, list) else f in source for f in found):
            continue
        statements = tree.body
        if kind.per_definition:
            if spans is None:  # byte offsets of each definition's lines
                starts = [0, *itertools.accumulate(len(line) for line in source.splitlines(keepends=True))]
                spans = [(starts[d.lineno - 1], starts[min(d.end_lineno, len(starts) - 1)]) for d in definitions]
            statements = [
                d
                for d, (start, end) in zip(definitions, spans)
                if all(
                    _within(f, start, end) if isinstance(f, list) else source.find(f, start, end) >= 0 for f in found
                )
            ]
        for name, entry in kind.summarize(statements, source).items():
            facts.summaries.setdefault(name, {})[kind.name] = entry


def _within(offsets: list[int], start: int, end: int) -> bool:
    i = bisect.bisect_left(offsets, start)
    return i < len(offsets) and offsets[i] < end


def extract_file_facts(source: bytes, path: str, module_name: str) -> FileFacts:
    facts = FileFacts(path=path)
    if len(source) > MAX_FACTS_BYTES:
        return facts  # skipped by the engine too
    try:
        tree = parse_python(source)  # the check's pre-filter gets this tree if it asks next
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return facts  # reported as MP000 by the file check
    facts.parses = True
    reader = _Reader(facts)
    for stmt in tree.body:  # module-level imports first: constants and setters resolve through them
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            reader.visit(stmt)
    if _FACT_TOKENS.search(source):  # every node visited once: facts and the names used
        reader.consts = _module_strings(tree, reader)
        for stmt in tree.body:
            if not isinstance(stmt, (ast.Import, ast.ImportFrom)):
                reader.visit(stmt)
        uses = reader.uses
    else:  # imports anywhere (functions import lazily), read from the statements alone; names used by one walk
        reader.visit_imports([s for s in tree.body if not isinstance(s, (ast.Import, ast.ImportFrom))])
        uses = _used_names(tree)
    if facts.trains:
        _follow_trained(tree, facts.trains, reader.made_by)
    for stmt in tree.body:
        facts.main_guard |= _is_main_guard(stmt)
        facts.top_level_work |= _does_work(stmt) and not _is_main_guard(stmt)
    facts.reexports = _reexports(facts.imports, module_name, _module_level_imports(tree.body))
    facts.uses = sorted(uses)
    _summaries(tree, source, facts)
    facts.defines = _defined_names(tree)
    plain = _plain_functions(tree)
    facts.functions = {name: sorted(_used_names(node, body_only=True)) for name, node in plain.items()}
    facts.outside_uses = sorted(_used_names(tree, skip={id(node) for node in plain.values()}))
    facts.subclasses = [
        stmt.name
        for stmt in tree.body
        if isinstance(stmt, ast.ClassDef)
        and any(not (isinstance(b, ast.Name) and b.id == "object") for b in stmt.bases)
    ]
    facts.aliases = _aliases(tree)
    if any(p.how != "layer" for p in facts.policies):
        facts.run_lines, first = run_lines(tree)
        facts.policies = [
            p if p.how == "layer" else replace(p, runs_at=setter_line(tree, p.line, first)) for p in facts.policies
        ]
    return facts
