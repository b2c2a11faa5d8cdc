"""Where rules live: one module per rule in ``mplint/checks/``, a family's rules together in its own package
(``loss_scaling/``: MP201-MP207), found by the registry at any depth."""

from __future__ import annotations

from collections import defaultdict

import pytest

from mplint.checks import _modules, all_rules

pytestmark = pytest.mark.quick  # the one-minute subset: python3 -m pytest -m quick


def _family(rule_id: str) -> str:
    return rule_id[:-2]  # MP201 -> MP2, MPT204 -> MPT2


def test_the_registry_finds_modules_in_subpackages_at_any_depth_but_those_named_with_an_underscore(tmp_path):
    root = tmp_path / "checks"
    for name in (
        "mp101_a.py",
        "_base.py",
        "loss/__init__.py",
        "loss/mp201_b.py",
        "loss/flow.py",
        "loss/_site.py",
        "loss/deeper/__init__.py",
        "loss/deeper/mp202_c.py",
        "_shared/__init__.py",
        "_shared/mp999_d.py",
    ):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("")
    assert sorted(_modules([str(root)], "pkg")) == [
        "pkg.loss.deeper.mp202_c",
        "pkg.loss.flow",
        "pkg.loss.mp201_b",
        "pkg.mp101_a",
    ]


def test_a_family_package_holds_the_whole_family_and_nothing_else():
    packages: dict[str, set[str]] = defaultdict(set)
    for rule_id, rule in all_rules().items():
        parts = rule.__module__.split(".")
        packages[".".join(parts[:-1])].add(rule_id)
    loose = packages.pop("mplint.checks")
    families = {package: {_family(r) for r in ids} for package, ids in packages.items()}
    assert {package: len(f) for package, f in families.items()} == {package: 1 for package in families}
    assert {_family(r) for r in loose} & set().union(*families.values()) == set()
    assert packages["mplint.checks.loss_scaling"] == {f"MP20{n}" for n in range(1, 8)}
    assert packages["mplint.checks.torch_amp"] == {f"MPT20{n}" for n in range(1, 7)}
