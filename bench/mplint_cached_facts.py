"""``mplint`` whose facts may come from ``.mplint_cache/`` while every file is still checked afresh.

The path-independence runs (``realworld.py --paths --cached-facts``) lint a big repository some fifty times; most
of a single-file run is reading the facts of every file of its project. Those facts are cached by what decides
them: each file's facts by its path and content, the project's module facts by the list of the project's files
with their contents, the settings, the project root and its pin files. A run whose project discovery differs (the
path dependence looked for) has another key and computes its facts afresh; a run whose key matches would compute the
same facts from the same inputs. The results cache is off: a cached result would hide a difference in the checks.

    python bench/mplint_cached_facts.py <mplint arguments, without --no-cache>
"""

from __future__ import annotations

import sys

from mplint.cli import main
from mplint.project.cache import ProjectCache

ProjectCache.use_settings = lambda self, key: None  # no results store: every file is checked

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
