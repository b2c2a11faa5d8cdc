"""Facts about the frameworks themselves (container images, which API exists in which version): data, no logic
that knows a project or a rule. Every layer may read it; it reads nothing of mplint."""
