"""Command line: ``mplint [check] PATHS``, ``mplint rules``, ``mplint explain ID`` (or ``rule ID``), ``mplint verify SCRIPT``.

Flags that Ruff also has mean what they mean in Ruff (``--show-fixes``, ``--fix-only``, ``-q``/``-s``,
``--exclude``, ``--force-exclude``, ``--per-file-ignores``, ``--watch``...).

Exit codes: 0 nothing left to report, 1 findings remain, 2 usage, config or internal error, or a file --fix could
not write (among them a file changed on disk after it was read: left as the user saved it). Paths that hold no
Python file or notebook exit 0 with a warning on standard error, as Ruff's do. A reader that closes
standard output early (``| head -1``) ends the output quietly, as Ruff does: no traceback, and the exit code the
run would have had.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from mplint import __version__
from mplint.knowledge.policies import POLICY_NAMES

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
PROGRESS_MIN_FILES = 100  # a bar only on runs long enough to need one
SUBCOMMANDS = ("check", "rules", "explain", "rule", "verify", "server")


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
        description="Find and fix TensorFlow/Keras and PyTorch mixed-precision bugs.",
        epilog="Other commands: 'mplint rules', 'mplint explain RULE' (or 'mplint rule RULE', '--all'), 'mplint verify SCRIPT', 'mplint server'. "
        "Exit codes: 0 clean, 1 findings remain, 2 error.",
    )
    p.add_argument("paths", nargs="*", type=Path, help="files or folders to check (default: .)")
    p.add_argument("--version", action="version", version=f"mplint {__version__}")
    p.add_argument("--fix", action="store_true", help="apply safe fixes")
    unsafe = p.add_mutually_exclusive_group()
    unsafe.add_argument(
        "--unsafe-fixes",
        dest="unsafe_fixes",
        action="store_true",
        default=None,
        help="also apply fixes that may change results or checkpoints (with --fix or --diff)",
    )
    unsafe.add_argument("--no-unsafe-fixes", dest="unsafe_fixes", action="store_false")
    p.add_argument("--diff", action="store_true", help="print the fixes as a unified diff; write nothing")
    p.add_argument(
        "--fix-only",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="apply fixes but report no remaining finding and exit 0 for them (implies --fix)",
    )
    p.add_argument(
        "--show-fixes",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="list the fixes applied, per file and rule, and each finding's documentation link",
    )
    p.add_argument("--watch", "-w", action="store_true", help="check again whenever a file changes (Ctrl-C ends)")
    p.add_argument("--select", action=_Extend, default=None, metavar="RULES", help="rule IDs, prefixes (MP2) or names")
    p.add_argument("--ignore", action=_Extend, default=[], metavar="RULES")
    p.add_argument("--extend-select", action=_Extend, default=[], metavar="RULES")
    p.add_argument(
        "--per-file-ignores",
        action=_Extend,
        default=None,
        metavar="GLOB:RULES",
        help="pairs glob:rule, comma-separated (replace the config's per-file-ignores)",
    )
    p.add_argument(
        "--extend-per-file-ignores",
        action=_Extend,
        default=[],
        metavar="GLOB:RULES",
        help="pairs glob:rule added to the config's per-file-ignores",
    )
    p.add_argument(
        "--exclude",
        action=_Extend,
        default=None,
        metavar="PATTERNS",
        help="gitignore-style patterns to skip (replace the config's exclude and the defaults)",
    )
    p.add_argument(
        "--extend-exclude",
        action=_Extend,
        default=[],
        metavar="PATTERNS",
        help="gitignore-style patterns to skip as well",
    )
    p.add_argument(
        "--force-exclude",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="apply the excludes to paths given on the command line too (pre-commit passes every file)",
    )
    p.add_argument(
        "--format",
        "--output-format",  # Ruff's name
        dest="format",
        choices=("text", "json", "github", "sarif"),
        default="text",
    )
    p.add_argument("--output-file", type=Path, help="write the report here instead of standard output")
    p.add_argument("--keras", type=int, choices=(2, 3), help="target Keras generation (overrides config and pins)")
    p.add_argument(
        "--target",
        choices=("tf1", "tf2.3", "keras2", "keras3"),
        help="target TensorFlow/Keras for every program: TF1, TF 2.1-2.3, Keras 2 or Keras 3 (overrides config and pins)",
    )
    p.add_argument(
        "--policy", choices=POLICY_NAMES, help="the policy the code runs under (overrides what the code sets)"
    )
    p.add_argument("--config", type=Path, help="config file (pyproject.toml or .mplint.yaml)")
    p.add_argument("--exit-zero", action="store_true", help="exit 0 even when findings remain")
    p.add_argument("--quiet", "-q", action="store_true", help="print the findings and nothing else")
    p.add_argument(
        "--silent", "-s", action="store_true", help="print nothing (the exit code still says whether findings remain)"
    )
    p.add_argument(
        "--color",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="colour the text output, or not (default: at a terminal; FORCE_COLOR, NO_COLOR as Ruff reads them)",
    )
    p.add_argument("--statistics", action="store_true", help="count findings per rule")
    p.add_argument(
        "--show-facts",
        action="store_true",
        help="print each program's entry point, the policies it sets, its target and TPU use; check nothing",
    )
    p.add_argument("--jobs", "-j", type=int, metavar="N", help="worker processes (default: one per core)")
    p.add_argument("--no-cache", action="store_true", help="ignore and do not update .mplint_cache/")
    adoption = p.add_argument_group("adoption and integrations")
    adoption.add_argument(
        "--add-noqa",
        action="store_true",
        help="add '# noqa: MPnnn' comments suppressing every current finding (a baseline)",
    )
    adoption.add_argument(
        "--changed-since",
        metavar="REV",
        help="check only files changed since git revision REV, plus untracked files "
        "(project facts still come from all PATHS)",
    )
    adoption.add_argument(
        "--stdin-filename",
        metavar="NAME",
        help="read the source of file NAME from standard input; with --fix print the fixed "
        "source to standard output and the report to standard error",
    )
    return p


def show_progress(stream, environ) -> bool:
    """A progress bar only for a person at a terminal: never in CI logs or pipes."""
    if environ.get("CI") or environ.get("MPLINT_NO_PROGRESS") or environ.get("TERM") == "dumb":
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


class _ProgressBar:
    """rich progress on standard error, one line per phase (discovery, facts, programs, checks, fixes), started only
    once a run proves long: some phase has ``min_files`` files or more."""

    LABELS = {
        "discovery": "Finding files",
        "facts": "Reading project facts",
        "programs": "Walking programs",
        "checks": "Checking files",
        "fixes": "Writing fixes",
    }

    def __init__(self, console=None, min_files: int = PROGRESS_MIN_FILES):
        self.console, self.min_files = console, min_files
        self.bar = None
        self.tasks: dict[str, int] = {}
        self.seen: dict[str, tuple[int, int | None]] = {}  # before the bar starts

    def __call__(self, phase: str, done: int, total: int | None) -> None:
        if self.bar is None:
            self.seen[phase] = (done, total)
            if total is None or total < self.min_files:
                return
            from rich.console import Console
            from rich.progress import Progress

            self.bar = Progress(console=self.console or Console(stderr=True), transient=True)
            self.bar.start()
            for earlier, (earlier_done, earlier_total) in self.seen.items():
                self._show(earlier, earlier_done, earlier_total)
            return
        self._show(phase, done, total)

    def _show(self, phase: str, done: int, total: int | None) -> None:
        task = self.tasks.get(phase)
        if task is None:
            task = self.tasks[phase] = self.bar.add_task(self.LABELS.get(phase, phase), total=total)
            self.bar.update(task, completed=done)
            self.bar.refresh()  # a new phase shows at once, however short
        else:
            self.bar.update(task, completed=done, total=total)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _usage_error(message: str) -> int:
    print(f"mplint: error: {message}", file=sys.stderr)
    return EXIT_ERROR


def _per_file_pairs(values: list[str]) -> dict[str, list[str]]:
    """Ruff's ``GLOB:RULE`` pairs (``tests/*:MP101,tests/*:MP102``) as the config's per-file-ignores table."""
    table: dict[str, list[str]] = {}
    for value in values:
        glob, sep, rule = value.rpartition(":")
        if not sep or not glob or not rule:
            raise ValueError(f"--per-file-ignores takes GLOB:RULE pairs, got {value!r}")
        table.setdefault(glob, []).append(rule)
    return table


def _run_check(argv: list[str]) -> int:
    args = _check_parser().parse_args(argv)  # first: --version and --help need none of the imports below

    from mplint.engine.registry import unknown_selectors

    try:
        per_file = None if args.per_file_ignores is None else _per_file_pairs(args.per_file_ignores)
        extend_per_file = _per_file_pairs(args.extend_per_file_ignores)
    except ValueError as exc:
        return _usage_error(str(exc))
    pair_rules = [r for table in (per_file or {}, extend_per_file) for rules in table.values() for r in rules]
    bad = unknown_selectors([*(args.select or []), *args.ignore, *args.extend_select, *pair_rules])
    if bad:
        return _usage_error(f"unknown rule selector {bad[0]!r} (see 'mplint rules')")
    args.fix = args.fix or args.fix_only
    if args.add_noqa and (args.fix or args.diff or args.stdin_filename):
        return _usage_error("--add-noqa cannot be combined with --fix, --fix-only, --diff or --stdin-filename")
    if args.stdin_filename and args.changed_since:
        return _usage_error("--stdin-filename cannot be combined with --changed-since")
    if args.watch and (args.stdin_filename or args.add_noqa or args.show_facts):
        return _usage_error("--watch cannot be combined with --stdin-filename, --add-noqa or --show-facts")
    stdin = (Path(args.stdin_filename), sys.stdin.buffer.read()) if args.stdin_filename else None
    paths = args.paths or ([] if stdin else [Path(".")])
    only = None
    if args.changed_since:
        from mplint.project.git import GitError, changed_files

        try:
            only = changed_files(args.changed_since, paths[0] if paths[0].is_dir() else paths[0].parent)
        except GitError as exc:
            return _usage_error(str(exc))
    from mplint.runner import RunOptions

    options = RunOptions(
        paths=paths,
        fix=args.fix or args.diff,
        unsafe_fixes=args.unsafe_fixes,
        write=not args.diff,
        select=args.select,
        ignore=args.ignore,
        extend_select=args.extend_select,
        per_file_ignores=per_file,
        extend_per_file_ignores=extend_per_file,
        exclude=args.exclude,
        extend_exclude=args.extend_exclude,
        force_exclude=args.force_exclude,
        keras=args.keras,
        target=args.target,
        policy=args.policy,
        config_path=args.config,
        add_noqa=args.add_noqa,
        only=only,
        stdin=stdin,
        jobs=args.jobs,
        cache=not args.no_cache,
    )
    if args.show_facts:  # the facts alone: no rule runs, nothing is written
        options.select, options.extend_select, options.fix, options.add_noqa = [], [], False, False
    if args.watch:
        from mplint.watch import watch

        return watch(lambda: _check_once(args, options, progress=False), options, sys.stdout)
    return _check_once(args, options, progress=not args.show_facts and show_progress(sys.stderr, os.environ))


def _check_once(args, options, progress: bool) -> int:
    """One run and its report; the exit code."""
    from mplint.catalog import CatalogError
    from mplint.project.config import ConfigError
    from mplint.runner import run

    bar = _ProgressBar() if progress and not args.silent else None
    options.on_progress = bar
    try:
        report = run(options)
    except (ConfigError, CatalogError) as exc:
        return _usage_error(str(exc))
    finally:
        if bar:
            bar.close()
    code = _exit_code(args, report)
    try:
        _write_report(args, report, options.stdin)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader has gone (| head -1): the run's outcome stands, unprinted
        if not _stdout_closed():
            raise
        _discard_stdout()
    return code


def _exit_code(args, report) -> int:
    if args.show_facts:
        return EXIT_OK
    if report.errors:
        return EXIT_ERROR
    if args.diff:
        pending = any(r.fixed_source is not None for r in report.results)
    else:  # --fix-only exits 0 when fixes leave findings behind, as Ruff's does
        pending = report.remaining and not args.fix_only
    return EXIT_FINDINGS if pending and not args.exit_zero else EXIT_OK


NO_FILES = "No Python files or notebooks found under the given path(s)"


def _print_warnings(report, args) -> None:
    """What the paths given held that was not checked, on standard error as Ruff warns (-q and -s hide it)."""
    if args.quiet or args.silent:
        return
    for skipped in report.skipped:
        print(f"mplint: warning: {skipped}", file=sys.stderr)
    if report.found_no_files:
        print(f"mplint: warning: {NO_FILES}", file=sys.stderr)


def _write_report(args, report, stdin) -> None:
    from mplint.output import renderer

    _print_warnings(report, args)
    if args.show_facts:
        from mplint.output import facts_report

        facts_report.render(report, sys.stdout)
        return
    if stdin and args.fix and not args.diff:
        result = next((r for r in report.results if r.path == stdin[0].as_posix()), None)  # None: force-excluded
        fixed = result.fixed_source if result is not None and result.fixed_source is not None else stdin[1]
        sys.stdout.buffer.write(fixed)
        sys.stdout.flush()
        default_out = sys.stderr  # the fixed source owns standard output
    else:
        default_out = sys.stdout
    if args.add_noqa:  # Ruff's meaning: the count of comments added, no report
        _print_errors(report, args.silent)
        if not (args.quiet or args.silent):
            skipped = f" ({report.noqa_skipped} could not carry a comment)" if report.noqa_skipped else ""
            added = report.noqa_added
            print(f"Added {added} noqa comment{'s' if added != 1 else ''}{skipped}.", file=sys.stderr)
        return
    if args.diff:
        out = open(args.output_file, "w", encoding="utf-8") if args.output_file else default_out
        try:
            _print_diff(report, out)
            n = report.fixed_count
            if n and not (args.quiet or args.silent):  # Ruff's summary, after the diff (git apply reads past it)
                out.write(f"\nWould fix {n} error{'s' if n != 1 else ''}.\n")
        finally:
            if out not in (sys.stdout, sys.stderr):
                out.close()
        _print_errors(report, args.silent)
        return
    if not args.silent and not (args.fix_only and args.format != "text"):
        out = open(args.output_file, "w", encoding="utf-8") if args.output_file else default_out
        try:
            renderer(args.format)(
                report,
                out,
                statistics=args.statistics,
                colour=args.color,
                quiet=args.quiet,
                show_fixes=args.show_fixes,
                fix_only=args.fix_only,
            )
        finally:
            if out not in (sys.stdout, sys.stderr):
                out.close()


def _print_errors(report, silent: bool) -> None:
    if not silent:
        for error in report.errors:
            print(f"mplint: error: {error}", file=sys.stderr)


def _decode(data: bytes) -> str:
    import io
    import tokenize

    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError):
        return data.decode("utf-8", errors="replace")


def _lines(text: str) -> list[str]:
    return (text if text.endswith("\n") or not text else text + "\n").splitlines(keepends=True)


def _print_diff(report, out) -> bool:
    import difflib

    changed = False
    for result in report.results:
        if result.fixed_source is None:
            continue
        changed = True
        if getattr(result, "fixed_cells", None):
            for cell, after in sorted(result.fixed_cells.items()):
                before = next(c.text for c in result.notebook.cells if c.index == cell)
                out.writelines(
                    difflib.unified_diff(
                        _lines(before),
                        _lines(after),
                        _diff_label("a", f"{result.path}:cell {cell}"),
                        _diff_label("b", f"{result.path}:cell {cell}"),
                    )
                )
            continue
        before = _decode(result.original_source).splitlines(keepends=True)
        after = _decode(result.fixed_source).splitlines(keepends=True)
        out.writelines(
            difflib.unified_diff(before, after, _diff_label("a", result.path), _diff_label("b", result.path))
        )
    return changed


def _diff_label(side: str, path: str) -> str:
    """git's ``a/``/``b/`` prefixes for a path relative to where mplint ran; an absolute path stays as it is."""
    return path if os.path.isabs(path) else f"{side}/{path}"


def _run_rules(argv: list[str]) -> int:
    from rich.console import Console
    from rich.table import Table

    from mplint.catalog import load_catalog

    parser = argparse.ArgumentParser(prog="mplint rules", description="List every rule of the catalog.")
    parser.add_argument("--format", choices=("table", "markdown"), default="table")
    parser.add_argument(
        "--pages",
        type=Path,
        metavar="DIR",
        help="write one Markdown page per rule (and an index) into DIR, e.g. docs/rules",
    )
    parser.add_argument(
        "--readme",
        type=Path,
        metavar="FILE",
        help="rewrite the rule table and the proofs list between FILE's markers, e.g. README.md",
    )
    args = parser.parse_args(argv)
    if args.readme:
        from mplint.rule_docs import write_readme

        try:
            print(write_readme(args.readme))
        except ValueError as error:
            print(f"mplint rules: {error}", file=sys.stderr)
            return EXIT_ERROR
        return EXIT_OK
    if args.pages:
        from mplint.rule_docs import write_pages

        written = write_pages(args.pages, list(load_catalog().values()))
        print(f"Wrote {len(written)} page{'s' if len(written) != 1 else ''} in {args.pages.as_posix()}.")
        return EXIT_OK
    if args.format == "markdown":
        from mplint.rule_docs import rules_markdown

        sys.stdout.write(rules_markdown())
        return EXIT_OK
    table = Table(title="mplint rules")
    for column in ("ID", "name", "fix", "kind", "default", "summary"):
        table.add_column(column, overflow="fold")
    for meta in load_catalog().values():
        table.add_row(
            meta.id, meta.name, meta.fix_safety.value, meta.kind, "yes" if meta.default_enabled else "no", meta.summary
        )
    Console(highlight=False, emoji=False, markup=False).print(table)
    return EXIT_OK


def _run_explain(argv: list[str], prog: str = "mplint explain") -> int:
    from mplint.explain import explain, explain_all

    parser = argparse.ArgumentParser(prog=prog, description="Show a rule's documentation.")
    parser.add_argument("rule", nargs="?", help="rule ID (MP101) or name (float16-softmax-output)")
    parser.add_argument("--all", action="store_true", help="every rule's documentation")
    args = parser.parse_args(argv)
    if args.all == bool(args.rule):
        parser.error("give one rule, or --all")
    if args.all:
        explain_all()
        return EXIT_OK
    return EXIT_OK if explain(args.rule) else EXIT_ERROR


def _run_rule(argv: list[str]) -> int:
    """``mplint rule MP101``: Ruff's name for ``explain``."""
    return _run_explain(argv, prog="mplint rule")


def _run_verify(argv: list[str]) -> int:
    from mplint.verify.cli import main as verify_main

    return verify_main(argv)


def _run_server(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="mplint server", description="Run the language server (LSP) on standard input and output."
    )
    parser.add_argument(
        "--stdio", action="store_true", help="accepted for editors that pass it; standard I/O is the only transport"
    )
    parser.parse_args(argv)
    from mplint.server.app import main as serve

    return serve()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv and argv[0] in SUBCOMMANDS else "check"
    if argv and argv[0] in SUBCOMMANDS:
        argv = argv[1:]
    try:
        code = {
            "check": _run_check,
            "rules": _run_rules,
            "explain": _run_explain,
            "rule": _run_rule,
            "verify": _run_verify,
            "server": _run_server,
        }[command](argv)
        if not sys.stdout.closed:  # the language server closes standard output when the editor ends it
            sys.stdout.flush()  # a closed pipe shows here rather than in the interpreter's last flush
        return code
    except SystemExit as exc:  # argparse: --help exits 0, usage errors exit 2
        if command in ("rules", "explain", "rule") and exc.code == 1:
            return EXIT_OK  # rich ends a print to a closed pipe so (these commands never fail with 1)
        return exc.code if isinstance(exc.code, int) else EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # rules, explain, verify: their output is all they do
        if not _stdout_closed():
            raise  # some other pipe (a worker's): a real failure
        _discard_stdout()
        return EXIT_OK


def _discard_stdout() -> None:
    """What is still buffered for standard output goes nowhere (not into a traceback at exit)."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _stdout_closed() -> bool:
    """Whether the reader of standard output has gone (``| head -1`` read its line)."""
    try:
        import select

        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(event & select.POLLERR for _, event in poller.poll(0))
    except (AttributeError, OSError, ValueError):
        return True  # no poll() (Windows): take the error at its word
