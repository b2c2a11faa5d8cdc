"""Fix edits (what a rule proposes) and the atomic writer that applies them to files."""
