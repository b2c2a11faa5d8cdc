"""Command line: ``mplint [check] PATHS``, ``mplint rules``, ``mplint explain ID``, ``mplint verify SCRIPT``.

Exit codes: 0 nothing left to report, 1 findings remain, 2 usage, config or internal error.
"""

from __future__ import annotations

import argparse
import difflib
import io
import sys
import tokenize
from pathlib import Path

from mplint import __version__

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
SUBCOMMANDS = ("check", "rules", "explain", "verify")


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


class _Extend(argparse.Action):
    """``--select MP1,MP2 --select MP5`` -> [MP1, MP2, MP5]."""

    def __call__(self, parser, namespace, values, option_string=None):
        current = getattr(namespace, self.dest) or []
        setattr(namespace, self.dest, current + _csv(values))


def _check_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mplint",
        description="Find and fix TensorFlow/Keras mixed-precision bugs.",
        epilog="Other commands: 'mplint rules', 'mplint explain RULE', 'mplint verify SCRIPT'. "
        "Exit codes: 0 clean, 1 findings remain, 2 error.",
    )
    p.add_argument("paths", nargs="*", type=Path, help="files or folders to check (default: .)")
    p.add_argument("--version", action="version", version=f"mplint {__version__}")
    p.add_argument("--fix", action="store_true", help="apply safe fixes")
    unsafe = p.add_mutually_exclusive_group()
    unsafe.add_argument("--unsafe-fixes", dest="unsafe_fixes", action="store_true", default=None,
                        help="also apply fixes that may change results or checkpoints (with --fix or --diff)")
    unsafe.add_argument("--no-unsafe-fixes", dest="unsafe_fixes", action="store_false")
    p.add_argument("--diff", action="store_true", help="print the fixes as a unified diff; write nothing")
    p.add_argument("--select", action=_Extend, default=None, metavar="RULES", help="rule IDs, prefixes (MP2) or names")
    p.add_argument("--ignore", action=_Extend, default=[], metavar="RULES")
    p.add_argument("--extend-select", action=_Extend, default=[], metavar="RULES")
    p.add_argument("--format", choices=("text", "json", "github", "sarif"), default="text")
    p.add_argument("--output-file", type=Path, help="write the report here instead of standard output")
    p.add_argument("--keras", type=int, choices=(2, 3), help="target Keras generation (overrides config and pins)")
    p.add_argument("--policy", choices=("float32", "float16", "bfloat16", "mixed_float16", "mixed_bfloat16"),
                   help="the policy the code runs under (overrides what the code sets)")
    p.add_argument("--config", type=Path, help="config file (pyproject.toml or .mplint.yaml)")
    p.add_argument("--exit-zero", action="store_true", help="exit 0 even when findings remain")
    p.add_argument("--statistics", action="store_true", help="count findings per rule")
    return p


def _run_check(argv: list[str]) -> int:
    from mplint.catalog import CatalogError
    from mplint.config import ConfigError
    from mplint.output import FORMATS
    from mplint.registry import unknown_selectors
    from mplint.runner import RunOptions, run

    args = _check_parser().parse_args(argv)
    bad = unknown_selectors([*(args.select or []), *args.ignore, *args.extend_select])
    if bad:
        print(f"mplint: error: unknown rule selector {bad[0]!r} (see 'mplint rules')", file=sys.stderr)
        return EXIT_ERROR
    options = RunOptions(
        paths=args.paths or [Path(".")],
        fix=args.fix or args.diff,
        unsafe_fixes=args.unsafe_fixes,
        write=not args.diff,
        select=args.select,
        ignore=args.ignore,
        extend_select=args.extend_select,
        keras=args.keras,
        policy=args.policy,
        config_path=args.config,
    )
    try:
        report = run(options)
    except (ConfigError, CatalogError) as exc:
        print(f"mplint: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    out = open(args.output_file, "w", encoding="utf-8") if args.output_file else sys.stdout
    try:
        if args.diff:
            changed = _print_diff(report, out)
            for error in report.errors:
                print(f"mplint: error: {error}", file=sys.stderr)
            return EXIT_ERROR if report.errors else EXIT_FINDINGS if changed and not args.exit_zero else EXIT_OK
        FORMATS[args.format](report, out, statistics=args.statistics)
    finally:
        if out is not sys.stdout:
            out.close()
    if report.errors:
        return EXIT_ERROR
    return EXIT_FINDINGS if report.remaining and not args.exit_zero else EXIT_OK


def _decode(data: bytes) -> str:
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError):
        return data.decode("utf-8", errors="replace")


def _print_diff(report, out) -> bool:
    changed = False
    for result in report.results:
        if result.fixed_source is None:
            continue
        changed = True
        before = _decode(result.original_source).splitlines(keepends=True)
        after = _decode(result.fixed_source).splitlines(keepends=True)
        out.writelines(difflib.unified_diff(before, after, f"a/{result.path}", f"b/{result.path}"))
    return changed


def _run_rules(argv: list[str]) -> int:
    from rich.console import Console
    from rich.table import Table

    from mplint.catalog import load_catalog

    argparse.ArgumentParser(prog="mplint rules", description="List every rule of the catalog.").parse_args(argv)
    table = Table(title="mplint rules")
    for column in ("ID", "name", "fix", "kind", "default", "summary"):
        table.add_column(column, overflow="fold")
    for meta in load_catalog().values():
        table.add_row(meta.id, meta.name, meta.fix_safety.value, meta.kind, "yes" if meta.default_enabled else "no", meta.summary)
    Console(highlight=False).print(table)
    return EXIT_OK


def _run_explain(argv: list[str]) -> int:
    from mplint.explain import explain

    parser = argparse.ArgumentParser(prog="mplint explain", description="Show a rule's documentation.")
    parser.add_argument("rule", help="rule ID (MP101) or name (float16-softmax-output)")
    args = parser.parse_args(argv)
    return EXIT_OK if explain(args.rule) else EXIT_ERROR


def _run_verify(argv: list[str]) -> int:
    from mplint.verify.cli import main as verify_main

    return verify_main(argv)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv and argv[0] in SUBCOMMANDS else "check"
    if argv and argv[0] in SUBCOMMANDS:
        argv = argv[1:]
    try:
        return {"check": _run_check, "rules": _run_rules, "explain": _run_explain, "verify": _run_verify}[command](argv)
    except SystemExit as exc:  # argparse: --help exits 0, usage errors exit 2
        return exc.code if isinstance(exc.code, int) else EXIT_ERROR
    except KeyboardInterrupt:
        return 130
