"""``mplint --show-facts``: what mplint believes about each program, the first thing to read when a finding surprises.

It shows the project of each path given (its nearest folder with a project marker), the programs of that
project that reach the files given, not every program of the project, and whether each file given is library
code (which distribution publishes it, and why)."""

from __future__ import annotations

from typing import TextIO


def render(report, stream: TextIO) -> None:
    for project in report.projects:
        stream.write(f"project {project.root.as_posix()} ({project.files} files)\n")
        if project.generation:
            stream.write(
                f"  target for every program: {project.generation['label']} ({project.generation['source']})\n"
            )
        programs = sorted(project.programs, key=lambda p: (not p["policies"], p["entry"]))
        for program in programs:
            count = program["modules"]
            stream.write(f"  program {program['entry']} (reaches {count} module{'s' if count != 1 else ''})\n")
            if program["policies"]:
                for site in program["policies"]:
                    where = f"cell {site['cell']}:{site['line']}" if site.get("cell") else site["line"]
                    stream.write(f"    policy {site['policy']} set at {site['path']}:{where}\n")
            else:
                stream.write("    policy: none set (float32)\n")
            generation = program["keras_generation"]
            stream.write(f"    target: {generation['label']} ({generation['source']})\n")
            if program.get("torch"):
                stream.write(f"    torch: {program['torch']['label']} ({program['torch']['source']})\n")
            for stack in program.get("trainers", ()):
                stream.write(f"    {stack['stack']}: {stack['label']} ({stack['source']})\n")
                for setting in stack["settings"]:
                    stream.write(f"      {setting}\n")
            if program["tpu"]:
                stream.write(f"    TPU: {', '.join(program['tpu'][:3])}{' ...' if len(program['tpu']) > 3 else ''}\n")
        if not programs and project.reached:
            stream.write("  no program of this project reaches the files given: library code\n")
        elif not programs:
            stream.write("  no programs (no notebook, script, __main__ module or test): library code only\n")
        _library_status(project.library, stream)


MAX_FILES_LISTED = 20


def _library_status(library: dict[str, str], stream: TextIO) -> None:
    """Whether each file given is library code, which distribution publishes it and why (as messages say it);
    for more files than a screen holds, how many are."""
    if len(library) <= MAX_FILES_LISTED:
        for path, status in sorted(library.items()):
            stream.write(f"  {path}: {status}\n")
        return
    counts: dict[str, int] = {}
    for status in library.values():
        kind = status.split(" (", 1)[0].split(";", 1)[0] if status.startswith("library code") else "not library code"
        counts[kind] = counts.get(kind, 0) + 1
    for kind, count in sorted(counts.items()):
        stream.write(f"  {count} of {len(library)} files given: {kind}\n")
