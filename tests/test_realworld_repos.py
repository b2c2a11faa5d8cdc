"""The real-world check on git repositories (bench/realworld_repos.py): offline, on tiny repositories built here."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
SCALER = "import torch\n\nscaler = torch.cuda.amp.GradScaler()\n"
AUTOCAST = "import torch\n\nwith torch.cuda.amp.autocast():\n    pass\n"


@pytest.fixture(scope="module")
def repos(realworld):
    return realworld.repos


def git(cwd: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "GIT_AUTHOR_DATE": "2020-01-01T00:00:00Z",
        "GIT_COMMITTER_DATE": "2020-01-01T00:00:00Z",
        "HOME": str(cwd),
    }
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


def make_repo(path: Path, files: dict[str, str]) -> str:
    """A git repository at ``path`` with ``files`` committed; returns the commit."""
    path.mkdir(parents=True)
    git(path, "init", "--quiet")
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git(path, "add", ".")
    git(path, "commit", "--quiet", "-m", "c")
    return git(path, "rev-parse", "HEAD")


def test_materialise_from_a_mirror_leaves_out_missing_blobs(repos, tmp_path):
    mirror = tmp_path / "mirror"
    commit = make_repo(mirror / "owner+tiny" / "repo", {"train.py": SCALER, "data/big.bin": "x" * 100})
    big = git(mirror / "owner+tiny" / "repo", "rev-parse", f"{commit}:data/big.bin")
    (mirror / "owner+tiny" / "repo" / ".git" / "objects" / big[:2] / big[2:]).unlink()  # what a store leaves out
    tree, skipped = repos.materialise(repos.Repository("owner/tiny", commit, "t"), tmp_path / "cache", mirror)
    assert tree == tmp_path / "cache" / "repos" / f"owner+tiny-{commit[:12]}"
    assert skipped == ["data/big.bin"]
    assert (tree / "train.py").read_text() == SCALER and not (tree / "data" / "big.bin").exists()
    assert sorted(p.name for p in tree.parent.iterdir()) == [tree.name, f"{tree.name}.skipped"]  # no staging left
    # a second call uses the cached tree, even with the mirror gone
    assert repos.materialise(repos.Repository("owner/tiny", commit, "t"), tmp_path / "cache", None) == (tree, skipped)


def test_materialise_clones_from_the_remote_at_the_pinned_commit(repos, tmp_path):
    origin = tmp_path / "origin" / "owner" / "tiny"
    first = make_repo(origin, {"train.py": SCALER})
    (origin / "train.py").write_text("changed = 1\n")
    git(origin, "commit", "--quiet", "-am", "later")
    tree, skipped = repos.materialise(
        repos.Repository("owner/tiny", first, "t"),
        tmp_path / "cache",
        None,
        remote=str(tmp_path / "origin") + "/{name}",
    )
    assert (tree / "train.py").read_text() == SCALER and skipped == []
    assert (tmp_path / "cache" / "git" / "owner+tiny.git" / "HEAD").exists()


def test_materialise_reports_a_commit_nobody_has(repos, tmp_path):
    make_repo(tmp_path / "mirror" / "owner+tiny", {"a.py": ""})
    with pytest.raises(repos.RepoError, match="fetch"):
        repos.materialise(repos.Repository("owner/tiny", "1" * 40, "t"), tmp_path / "cache", tmp_path / "mirror")


def diagnostic(path, rule="MPT502", line=3, col=10, message="m", cell=None):
    return {"path": path, "cell": cell, "rule": rule, "start": {"line": line, "column": col}, "message": message}


def test_path_differences_compare_each_file_of_the_run(repos):
    root = [diagnostic("pkg/a.py"), diagnostic("pkg/b.py", line=4), diagnostic("other/c.py")]
    run = [diagnostic("pkg/a.py"), diagnostic("pkg/b.py", line=5), diagnostic("pkg/n.ipynb", cell=2)]
    assert repos.path_differences("o/r", root, "pkg/", run) == [
        {
            "package": "o/r",
            "run": "pkg/",
            "path": "pkg/b.py",
            "only_root": [["MPT502", 4, 10, "m"]],
            "only_run": [["MPT502", 5, 10, "m"]],
        },
        {
            "package": "o/r",
            "run": "pkg/",
            "path": "pkg/n.ipynb:cell 2",
            "only_root": [],
            "only_run": [["MPT502", 3, 10, "m"]],
        },
    ]
    assert repos.path_differences("o/r", root, "other/c.py", []) == [
        {
            "package": "o/r",
            "run": "other/c.py",
            "path": "other/c.py",
            "only_root": [["MPT502", 3, 10, "m"]],
            "only_run": [],
        }
    ]


def test_path_runs_are_top_level_folders_and_a_seeded_sample(repos, tmp_path):
    for name in ("a/x.py", "a/y.ipynb", "b/c/z.py", "top.py", ".hidden/h.py", "a/readme.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    assert repos.lintable_files(tmp_path) == ["a/x.py", "a/y.ipynb", "b/c/z.py", "top.py"]
    runs = repos.path_runs(tmp_path, 2, 0)
    assert runs[:2] == ["a/", "b/"] and len(runs) == 4 and set(runs[2:]) <= set(repos.lintable_files(tmp_path))
    assert repos.path_runs(tmp_path, 2, 0) == runs  # the seed fixes the sample
    assert repos.path_runs(tmp_path, 9, 0) == ["a/", "b/", "a/x.py", "a/y.ipynb", "b/c/z.py", "top.py"]


def fix(path="a.py", rule="MPT502", line=3, after="new", **extra):
    return {
        "package": "o/r",
        "path": path,
        "rule": rule,
        "line": line,
        "col": 1,
        "message": "m",
        "safety": "safe",
        "applied": True,
        "edits": [{"line": line, "before": "old", "after": after}],
        **extra,
    }


def test_cached_facts_path_runs_check_every_file_and_leave_the_tree_alone(repos, tmp_path):
    """With cached facts the path runs lint a copy of the tree: facts and module facts are cached there, no
    results; a path run that finds what the root run found shows no difference."""
    tree = tmp_path / "tree"
    for name, text in {"train.py": SCALER, "sub/run.py": AUTOCAST, "sub/other.py": "x = 1\n"}.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(text)
    root = repos.mplint(tree, ".", repo_root=REPO)["diagnostics"]
    assert sorted((d["path"], d["rule"]) for d in root) == [("sub/run.py", "MPT502"), ("train.py", "MPT502")]
    assert repos.check_paths("o/r", tree, root, REPO, 0, 0, cached_facts=True) == (3, [])  # sub/, each finding's file
    assert not (tree / ".mplint_cache").exists()

    run = repos.mplint(tree, "sub/run.py", repo_root=REPO, cached_facts=True)["diagnostics"]
    assert [(d["path"], d["rule"], d["start"]["line"]) for d in run] == [("sub/run.py", "MPT502", 3)]
    stored = sorted(p.name for p in (tree / ".mplint_cache" / "v2").iterdir())
    assert stored == ["facts.json", "modules.json"]  # the results of the checks are never cached
    changed = [{**root[0], "message": "other"}, *root[1:]]  # a finding the path run does not repeat
    assert repos.check_paths("o/r", tree, changed, REPO, 0, 0, cached_facts=True)[1][0]["only_root"] == [
        [root[0]["rule"], root[0]["start"]["line"], root[0]["start"]["column"], "other"]
    ]


def test_fix_verdicts_follow_the_fix_text(repos):
    recorded = [
        fix(verdict="right", reason="r", status="current"),
        fix("b.py", verdict="harmful", reason="r", status="current"),
    ]
    now = [fix(), fix("b.py", after="other")]  # b.py's fix writes something else now: a new review
    verdicts, vanished = repos.compare_fixes(now, recorded, {"o/r"})
    assert [(f["path"], v) for f, v in verdicts] == [("a.py", "right"), ("b.py", "unreviewed")]
    assert [(f["path"], f["edits"][0]["after"]) for f in vanished] == [("b.py", "new")]
    result = repos.updated_fixes(recorded, now, {"o/r"})
    assert [(f["path"], f["edits"][0]["after"], f["verdict"], f["status"]) for f in result] == [
        ("a.py", "new", "right", "current"),
        ("b.py", "new", "harmful", "vanished"),
        ("b.py", "other", "unreviewed", "current"),
    ]


def test_review_table_rows(repos):
    findings = [
        ({"package": "o/r", "rule": "MPT502"}, "tp"),
        ({"package": "o/r", "rule": "MPT502"}, "fp"),
        ({"package": "o/r", "rule": "MP601"}, "unreviewed"),
        ({"package": "o/r", "rule": "MP000"}, "tp"),
    ]
    fixes = [
        ({"package": "o/r", "rule": "MPT502"}, "harmful"),
        ({"package": "o/r", "rule": "MPT502"}, "right"),
        ({"package": "o/r", "rule": "MPT502"}, "unreviewed"),
    ]
    plants = [({"package": "o/r", "rule": "MPT202"}, False), ({"package": "o/r", "rule": "MP601"}, True)]
    lines = repos.format_rows(repos.review_table(findings, fixes, plants, "framework"), ["framework", *repos.COLUMNS])
    assert lines == [
        "framework   findings  tp  fp  unreviewed  precision  fixes  right  harmful  no-op  fix_unreviewed  "
        "fix_correct  plants  found  recall",
        "engine             1   1   0           0     100.0%      0      0        0      0               0  "
        "          -       0      0       -",
        "pytorch            2   1   1           0      50.0%      3      1        1      0               1  "
        "      50.0%       1      0    0.0%",
        "tensorflow         1   0   0           1          -      0      0        0      0               0  "
        "          -       1      1  100.0%",
        "all                4   2   1           1      66.7%      3      1        1      0               1  "
        "      50.0%       2      1   50.0%",
    ]


def test_plants_are_found_on_their_line_and_rule(repos):
    plant = {"package": "o/r", "path": "a.py", "line": 3, "rule": "MPT502", "why": "w"}
    assert repos.plant_found(plant, [{"package": "o/r", "path": "a.py", "line": 3, "rule": "MPT502"}])
    assert not repos.plant_found(plant, [{"package": "o/r", "path": "a.py", "line": 4, "rule": "MPT502"}])
    assert not repos.plant_found(plant, [{"package": "o/r", "path": "a.py", "line": 3, "rule": "MPT202"}])


def test_the_check_exits_1_until_every_finding_and_fix_has_a_verdict(realworld, repos, tmp_path, monkeypatch, capsys):
    mirror = tmp_path / "mirror"
    commit = make_repo(
        mirror / "owner+tiny" / "repo", {"train.py": SCALER, "sub/run.py": AUTOCAST, "requirements.txt": "torch>=2.4\n"}
    )
    monkeypatch.setattr(repos, "REPOSITORIES", [repos.Repository("owner/tiny", commit, "t")])
    snapshot = tmp_path / "snapshot.yaml"
    args = ["--repos", "--cache", str(tmp_path / "cache"), "--mirror", str(mirror), "--snapshot", str(snapshot)]

    assert realworld.main(args + ["--update", "--paths", "--sample", "1"]) == 1
    out = capsys.readouterr().out
    assert "NEW (need review): 2" in out and "FIXES WITHOUT A VERDICT: 2" in out
    recorded = yaml.safe_load(snapshot.read_text())
    assert list(recorded["repositories"]) == ["owner/tiny"]
    assert recorded["repositories"]["owner/tiny"]["commit"] == commit
    assert recorded["repositories"]["owner/tiny"]["files"] == 2
    assert [(f["path"], f["rule"], f["line"], f["verdict"]) for f in recorded["findings"]] == [
        ("sub/run.py", "MPT502", 3, "unreviewed"),
        ("train.py", "MPT502", 3, "unreviewed"),
    ]
    assert [(f["path"], f["applied"], f["edits"]) for f in recorded["fixes"]] == [
        ("sub/run.py", True, [{"line": 3, "before": "torch.cuda.amp.autocast()", "after": 'torch.autocast("cuda")'}]),
        (
            "train.py",
            True,
            [{"line": 3, "before": "torch.cuda.amp.GradScaler()", "after": 'torch.amp.GradScaler("cuda")'}],
        ),
    ]
    assert recorded["path_independence"]["owner/tiny"]["runs"] == 3  # sub/, a sampled file, the other finding's file
    assert recorded["path_independence"]["owner/tiny"]["differences"] == []

    for entry in recorded["findings"]:
        entry.update(verdict="tp", reason="torch 2.4+ warns")
    recorded["fixes"][0].update(verdict="right", reason="exists from torch 1.12")
    recorded["fixes"][1].update(verdict="harmful", reason="AttributeError before torch 2.3")
    recorded["plants"] = [
        {"package": "owner/tiny", "path": "train.py", "line": 3, "rule": "MPT502", "why": "w"},
        {"package": "owner/tiny", "path": "train.py", "line": 1, "rule": "MPT201", "why": "w"},
    ]
    snapshot.write_text(yaml.safe_dump(recorded, sort_keys=False))
    assert realworld.main(args) == 0
    out = capsys.readouterr().out
    table = out[out.index("per repository") :].splitlines()
    assert table[1].split() == ["package", "commit", "files", "cold_s", *repos.COLUMNS, "path_runs", "path_diffs"]
    row = table[2].split()
    assert re.fullmatch(r"\d+\.\d", row[3])  # the cold time
    assert row[:3] + row[4:] == [
        "owner/tiny",
        commit[:12],
        "2",
        "2",
        "2",
        "0",
        "0",
        "100.0%",
        "2",
        "1",
        "1",
        "0",
        "0",
        "50.0%",
        "2",
        "1",
        "50.0%",
        "3",
        "0",
    ]
    per_rule = out[out.index("per rule:") :].splitlines()[1:5]
    assert per_rule == [
        "rule    findings  tp  fp  unreviewed  precision  fixes  right  harmful  no-op  fix_unreviewed  fix_correct"
        "  plants  found  recall",
        "MPT201         0   0   0           0          -      0      0        0      0               0            -"
        "       1      0    0.0%",
        "MPT502         2   2   0           0     100.0%      2      1        1      0               0        50.0%"
        "       1      1  100.0%",
        "all            2   2   0           0     100.0%      2      1        1      0               0        50.0%"
        "       2      1   50.0%",
    ]
    assert "PLANTED DEFECTS NOT FOUND: 1" in out
    assert realworld.main(args + ["--recorded"]) == 0  # the same tables from the snapshot, nothing linted
    recorded_out = capsys.readouterr().out
    assert recorded_out[recorded_out.index("per rule:") :].splitlines()[1:5] == per_rule

    recorded["fixes"][1]["verdict"] = "unreviewed"
    snapshot.write_text(yaml.safe_dump(recorded, sort_keys=False))
    assert realworld.main(args) == 1  # a fix without a verdict fails the check as a finding does


def test_an_unreachable_repository_exits_2(realworld, repos, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(repos, "REPOSITORIES", [repos.Repository("owner/none", "1" * 40, "t")])
    args = [
        "--repos",
        "--cache",
        str(tmp_path / "cache"),
        "--remote",
        str(tmp_path / "nowhere") + "/{name}",
        "--snapshot",
        str(tmp_path / "snapshot.yaml"),
    ]
    assert realworld.main(args) == 2
    assert "NOT CHECKED: 1" in capsys.readouterr().out


def test_pinned_repositories_are_distinct_commits_and_not_reserved(repos):
    reserved = {
        "NVIDIA/DeepLearningExamples",
        "keras-team/keras-hub",
        "keras-team/keras-cv",
        "tensorflow/docs",
        "tensorflow/tpu",
        "google/automl",
        "OpenNMT/OpenNMT-tf",
        "TensorSpeech/TensorFlowTTS",
        "TensorSpeech/TensorFlowASR",
        "facebookresearch/mae",
        "facebookresearch/dinov2",
        "openai/guided-diffusion",
        "google-research/big_transfer",
        "leondgarse/Keras_insightface",
        "leondgarse/keras_cv_attention_models",
        "andreped/GradientAccumulator",
        "microsoft/Swin-Transformer",
    }
    names = [r.name for r in repos.REPOSITORIES]
    assert len(names) == len(set(names)) >= 12 and not reserved & set(names)
    assert all(re.fullmatch(r"[0-9a-f]{40}", r.commit) for r in repos.REPOSITORIES)


def test_a_kept_fix_verdict_records_todays_safety_and_message(repos):
    recorded = [fix(verdict="harmful", reason="r", status="current")]
    now = [dict(fix(), safety="unsafe", message="now unsafe: the fix holds on Keras 3 only")]
    [entry] = repos.updated_fixes(recorded, now, {"o/r"})
    assert (entry["verdict"], entry["safety"], entry["message"]) == (
        "harmful",
        "unsafe",
        "now unsafe: the fix holds on Keras 3 only",
    )
