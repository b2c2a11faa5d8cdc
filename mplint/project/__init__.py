"""Project-level facts: which files form a project, its configuration, cache, and
what its programs set (policies, Keras generation, TPU use, import graph)."""
