"""The real-world precision check's snapshot and comparison logic (offline: nothing is downloaded or linted)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def finding(path="a.py", rule="MP101", line=1, col=1, message="m", **extra):
    return {"package": "pkg", "path": path, "rule": rule, "line": line, "col": col, "message": message, **extra}


def test_snapshot_entries_are_reviewed_and_well_formed(realworld):
    snapshot = realworld.load_snapshot(realworld.SNAPSHOT)
    assert snapshot["findings"], "the snapshot is empty"
    keys = set()
    for entry in snapshot["findings"]:
        where = realworld.describe(entry)
        assert entry["package"] in realworld.PACKAGE_NAMES + realworld.REPOSITORY_NAMES, where
        assert isinstance(entry["line"], int) and isinstance(entry["col"], int), where
        assert entry["verdict"] in realworld.VERDICTS, where
        assert entry["status"] in realworld.STATUSES, where
        if entry["verdict"] != "unreviewed":
            assert entry["reason"].strip() and "\n" not in entry["reason"], where
        assert realworld.key(entry) not in keys, f"duplicate entry: {where}"
        keys.add(realworld.key(entry))


def test_snapshot_packages_are_the_pinned_ones(realworld):
    snapshot = realworld.load_snapshot(realworld.SNAPSHOT)
    pinned = {p.name: p.version for p in realworld.PACKAGES}
    for name, version in snapshot["packages"].items():
        assert name in realworld.PACKAGE_NAMES
        if name in pinned:
            assert version == pinned[name], name


def test_compare_reports_new_vanished_reappeared_and_changed(realworld):
    recorded = [
        finding("kept.py", verdict="tp", reason="r", status="current"),
        finding("gone.py", verdict="fp", reason="r", status="current"),
        finding("back.py", verdict="fp", reason="r", status="vanished"),
        finding("reworded.py", message="old", verdict="fp", reason="r", status="current"),
        {**finding("other.py"), "package": "unchecked", "verdict": "fp", "reason": "r", "status": "current"},
    ]
    now = [finding("kept.py"), finding("back.py"), finding("reworded.py", message="new"), finding("new.py")]
    result = realworld.compare(now, recorded, {"pkg"})
    assert [f["path"] for f in result.new] == ["new.py"]
    assert [f["path"] for f in result.vanished] == ["gone.py"]  # the unchecked package's entry is not "vanished"
    assert [f["path"] for f in result.reappeared] == ["back.py"]
    assert [(e["message"], f["message"]) for e, f in result.changed] == [("old", "new")]
    assert sorted(v for _, v in result.verdicts) == ["fp", "fp", "tp", "unreviewed"]


def test_update_keeps_verdicts_marks_vanished_and_adds_unreviewed(realworld):
    recorded = [
        finding("kept.py", message="old", verdict="tp", reason="real", status="current"),
        finding("gone.py", verdict="fp", reason="noise", status="current"),
        {**finding("other.py"), "package": "unchecked", "verdict": "fp", "reason": "r", "status": "current"},
    ]
    result = {
        f["path"]: f
        for f in realworld.updated(recorded, [finding("kept.py", message="new"), finding("new.py")], {"pkg"})
    }
    assert result["kept.py"] == finding("kept.py", message="new", verdict="tp", reason="real", status="current")
    assert result["gone.py"]["status"] == "vanished" and result["gone.py"]["verdict"] == "fp"
    assert result["new.py"]["verdict"] == "unreviewed" and result["new.py"]["status"] == "current"
    assert result["other.py"]["status"] == "current"  # packages not checked in this run stay as they were


def test_precision_counts_only_reviewed_findings(realworld):
    verdicts = [
        (finding(rule="MP101"), "tp"),
        (finding(rule="MP101"), "fp"),
        (finding(rule="MP102"), "fp"),
        (finding(rule="MP102"), "unreviewed"),
    ]
    rows = {row["rule"]: row for row in realworld.precision_table(verdicts, "rule")}
    assert rows["MP101"]["precision"] == 0.5
    assert rows["MP102"] == {"rule": "MP102", "tp": 0, "fp": 1, "unreviewed": 1, "precision": 0.0}
    assert rows["all"]["precision"] == round(1 / 3, 3) and rows["all"]["unreviewed"] == 1


def test_vanished_true_positives_are_reported_as_lost(realworld):
    sections = realworld.vanished_by_verdict([finding(verdict="tp"), finding(verdict="fp"), finding()])
    assert [len(items) for items in sections.values()] == [1, 1, 1]
    assert "lost" in next(iter(sections))


def make_sdist(path, members):
    import io
    import tarfile

    with tarfile.open(path, "w:gz") as archive:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def test_sdist_unpacks_to_its_top_folder(realworld, tmp_path):
    sdist = make_sdist(tmp_path / "pkg-1.0.tar.gz", {"pkg-1.0/setup.py": "", "pkg-1.0/pkg/__init__.py": "x = 1\n"})
    tree = tmp_path / "trees" / "pkg-1.0"
    tree.parent.mkdir()
    realworld.unpack(sdist, tree)
    assert (tree / "pkg" / "__init__.py").read_text() == "x = 1\n" and (tree / "setup.py").exists()
    assert [p.name for p in tree.parent.iterdir()] == ["pkg-1.0"]  # no staging folder left behind


def test_sdist_members_outside_the_archive_are_refused(realworld, tmp_path):
    sdist = make_sdist(tmp_path / "pkg-1.0.tar.gz", {"pkg-1.0/setup.py": "", "pkg-1.0/../../evil.py": ""})
    tree = tmp_path / "trees" / "pkg-1.0"
    tree.parent.mkdir()
    with pytest.raises(realworld.FetchError, match="outside"):
        realworld.unpack(sdist, tree)
    assert not tree.exists() and not list(tree.parent.iterdir()) and not (tmp_path / "evil.py").exists()


def test_archives_are_found_by_kind_and_name(realworld, tmp_path):
    for name in (
        "deep_speed-0.1.tar.gz",
        "deep-speed-0.10.tar.gz",
        "tool_kit-2.0-py3-none-any.whl",
        "tool_kit-2.0.tar.gz",
    ):
        (tmp_path / name).write_bytes(b"")
    sdist = realworld.Package("deep-speed", "0.1", "0" * 64, realworld.PYTORCH, sdist=True)
    wheel = realworld.Package("tool-kit", "2.0", "0" * 64)
    assert realworld.archive_in(tmp_path, sdist).name == "deep_speed-0.1.tar.gz"
    assert realworld.archive_in(tmp_path, wheel).name == "tool_kit-2.0-py3-none-any.whl"
    assert realworld.archive_in(tmp_path, realworld.Package("tool-kit", "2.1", "0" * 64)) is None


def test_pinned_packages_have_a_sha256_and_a_framework(realworld):
    assert len({p.name for p in realworld.PACKAGES}) == len(realworld.PACKAGES)
    for package in realworld.PACKAGES:
        assert len(package.sha256) == 64 and int(package.sha256, 16) >= 0, package.name
        assert package.framework in (realworld.TENSORFLOW, realworld.PYTORCH), package.name
    assert realworld.FRAMEWORKS[realworld.KERAS_SRC] == realworld.TENSORFLOW


def test_precision_per_framework(realworld):
    verdicts = [
        ({**finding(), "package": "timm"}, "tp"),
        ({**finding(), "package": "tf-keras"}, "fp"),
        ({**finding(), "package": "keras-src"}, "tp"),
    ]
    rows = {row["framework"]: row for row in realworld.framework_table(verdicts)}
    assert rows["pytorch"]["precision"] == 1.0 and rows["tensorflow"]["precision"] == 0.5
    assert rows["all"]["tp"] == 2 and rows["all"]["fp"] == 1


def test_snapshot_fixes_plants_and_repositories_are_well_formed(realworld):
    snapshot = realworld.load_snapshot(realworld.SNAPSHOT)
    pinned = {r.name: r.commit for r in realworld.repos.REPOSITORIES}
    for name, entry in snapshot["repositories"].items():
        assert entry["commit"] == pinned[name], name
        assert entry["files"] > 0 and entry["cold_s"] > 0, name
    keys = set()
    for fix in snapshot["fixes"]:
        where = realworld.repos.describe_fix(fix)
        assert fix["package"] in pinned and fix["verdict"] in realworld.repos.FIX_VERDICTS, where
        assert fix["edits"] and fix["safety"] in ("safe", "unsafe"), where
        if fix["verdict"] != "unreviewed":
            assert fix["reason"].strip() and "\n" not in fix["reason"], where
        assert realworld.repos.fix_key(fix) not in keys, f"duplicate fix: {where}"
        keys.add(realworld.repos.fix_key(fix))
    for plant in snapshot["plants"]:
        assert plant["package"] in pinned and plant["why"].strip() and isinstance(plant["line"], int), plant
    for name, record in snapshot["path_independence"].items():
        assert record["commit"] == pinned[name] and record["runs"] > 0, name
