"""The language server (``mplint server``): diagnostics, fixes and ``noqa`` actions in editors.

It checks with the same runner, configuration and project facts as the command line
(``documents``), converts positions and fixes to LSP (``edits``, ``actions``) and speaks
LSP over standard input and output with pygls (``app``).
"""
