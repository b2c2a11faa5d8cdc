"""``mplint --watch``: check, then check again whenever a checked file or a config file changes.

The files' modification times and sizes are polled (every ``POLL_SECONDS``, so a change is seen
within that bound and an idle watch costs one directory walk per poll); Ctrl-C ends it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from mplint.project.config import YAML_NAMES, load_config
from mplint.project.discovery import discover

POLL_SECONDS = float(os.environ.get("MPLINT_WATCH_POLL", "0.5"))
_CONFIG_NAMES = ("pyproject.toml", *YAML_NAMES)


def snapshot(options) -> dict[Path, tuple[int, int]]:
    """(mtime, size) of every file a check reads: the files found under the paths and the config files."""
    try:
        config = load_config(options.paths, options.config_path)
    except Exception:  # a broken config is reported by the run itself; watch its file all the same
        config = None
    root = config.root if config else Path.cwd()
    found = discover(
        options.paths,
        root,
        config.exclude if config else None,
        config.extend_exclude if config else (),
        config.respect_gitignore if config else True,
    )
    watched = [s.path for s in found.files]
    if options.config_path:
        watched.append(Path(os.path.abspath(options.config_path)))
    watched += [root / name for name in _CONFIG_NAMES]
    stamps = {}
    for path in watched:
        try:
            st = os.stat(path)
        except OSError:
            continue
        stamps[path] = (st.st_mtime_ns, st.st_size)
    return stamps


def watch(check: Callable[[], int], options, stream: TextIO, polls: int | None = None) -> int:
    """Run ``check`` now and after each change; returns only on Ctrl-C (130), or after ``polls`` polls (tests)."""
    terminal = getattr(stream, "isatty", lambda: False)()
    stream.write("Starting linter in watch mode...\n")
    stream.flush()
    seen = snapshot(options)  # before the check, so that a file saved while it runs is checked again
    code = check()
    stream.flush()
    try:
        while polls is None or polls > 0:
            time.sleep(POLL_SECONDS)
            if polls is not None:
                polls -= 1
            now = snapshot(options)
            if now == seen:
                continue
            seen = now
            if terminal:
                stream.write("\x1b[2J\x1b[H")  # clear the screen, as Ruff does
            stream.write("File change detected...\n")
            stream.flush()
            code = check()
            stream.flush()
    except KeyboardInterrupt:
        return 130
    return code
