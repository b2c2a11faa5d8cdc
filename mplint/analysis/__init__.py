"""Per-file analyses shared by several rules."""
