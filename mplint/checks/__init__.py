"""One module per rule; see ``mplint.rule.Rule``."""
