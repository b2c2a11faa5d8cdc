"""The per-file engine: parse, pre-filter, dispatch rules over libcst, apply fixes.

Kept import-free so that a warm run (everything cached) never loads libcst."""
