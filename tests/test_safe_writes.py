"""``--fix`` never overwrites a user's edit, writes through links, keeps hard links, mode, owner and group, and
the next run deals with the temporary files of an interrupted one."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

import mplint.runner
from mplint.cli import main
from mplint.project import writer
from mplint.project.writer import FileChangedError, write_atomic

GOOD = 'import keras\nm = keras.Sequential([keras.layers.Dense(3, activation="softmax")])\n'
GOOD_FIXED = GOOD.replace('"softmax")', '"softmax", dtype="float32")')
EDITED = "# edited by the user while mplint ran\n" + GOOD


@pytest.fixture
def project(tmp_path, monkeypatch):
    root = tmp_path / "project"
    root.mkdir()
    (root / ".mplint.yaml").write_text("policy: mixed_float16\n")
    (root / "good.py").write_text(GOOD)
    monkeypatch.chdir(root)
    return root


def run_json(capsys, *args):
    code = main([*args, "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


def entries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name != ".mplint_cache")


# -- a file changed between read and write -------------------------------------------------


def edit_after_check(monkeypatch, name: str, text: str) -> None:
    """The user saves ``name`` once mplint has read and checked it, before the fixes are written."""
    check_file = mplint.runner._check_file

    def check_then_edit(source, data, check):
        result = check_file(source, data, check)
        if source.path.name == name:
            source.path.write_text(text)
        return result

    monkeypatch.setattr(mplint.runner, "_check_file", check_then_edit)


def test_file_edited_during_the_run_keeps_the_edit_and_exits_2(project, capsys, monkeypatch):
    (project / "edited.py").write_text(GOOD)
    edit_after_check(monkeypatch, "edited.py", EDITED)
    code, doc = run_json(capsys, ".", "--fix")
    assert code == 2
    assert (project / "edited.py").read_text() == EDITED
    assert (project / "good.py").read_text() == GOOD_FIXED
    assert doc["errors"] == ["edited.py: not fixed: the file changed on disk after mplint read it; run mplint again"]
    assert doc["summary"]["changed_on_disk"] == ["edited.py"]
    # the findings are those of the file as the user left it (one line lower)
    assert [(d["path"], d["rule"], d["start"]["line"]) for d in doc["diagnostics"]] == [("edited.py", "MP101", 3)]
    assert [d["path"] for d in doc["fixed"]] == ["good.py"]
    assert entries(project) == [".mplint.yaml", "edited.py", "good.py"]


def test_text_summary_names_the_files_left_unfixed(project, capsys, monkeypatch):
    (project / "edited.py").write_text(GOOD)
    edit_after_check(monkeypatch, "edited.py", EDITED)
    assert main([".", "--fix"]) == 2
    out = capsys.readouterr().out.splitlines()
    assert out[-4:] == [
        "error: edited.py: not fixed: the file changed on disk after mplint read it; run mplint again",
        "Fixed 1 error.",
        "Left 1 file unfixed: changed on disk during the run (run mplint again).",
        "Found 1 error (1 fixable with `--fix`).",
    ]


def test_add_noqa_leaves_a_file_edited_during_the_run_alone(project, capsys, monkeypatch):
    edit_after_check(monkeypatch, "good.py", EDITED)
    assert main([".", "--add-noqa"]) == 2
    assert (project / "good.py").read_text() == EDITED


def test_edit_saved_while_the_temporary_file_is_written_wins(tmp_path, monkeypatch):
    target = tmp_path / "mod.py"
    target.write_bytes(b"x = 1\n")
    fsync = os.fsync

    def fsync_while_user_saves(fd):
        fsync(fd)
        target.write_bytes(b"x = 'saved by the editor'\n")

    monkeypatch.setattr(os, "fsync", fsync_while_user_saves)
    with pytest.raises(FileChangedError):
        write_atomic(target, b"x = 2\n", expected=b"x = 1\n")
    assert target.read_bytes() == b"x = 'saved by the editor'\n"
    assert entries(tmp_path) == ["mod.py"]


def test_write_of_bytes_already_there_is_a_no_op(tmp_path):
    target = tmp_path / "mod.py"
    target.write_bytes(b"x = 2\n")
    stamp = target.stat().st_mtime_ns
    time.sleep(0.01)
    assert write_atomic(target, b"x = 2\n", expected=b"x = 1\n") is False
    assert target.stat().st_mtime_ns == stamp


# -- links, mode, owner ---------------------------------------------------------------------


def test_symlink_to_a_file_outside_the_tree_is_written_through(project, capsys):
    outside = project.parent / "outside"
    outside.mkdir()
    (outside / "target.py").write_text(GOOD)
    os.symlink(outside / "target.py", project / "link.py")
    code, doc = run_json(capsys, ".", "--fix")
    assert code == 0, doc["errors"]
    assert (project / "link.py").is_symlink() and os.readlink(project / "link.py") == str(outside / "target.py")
    assert (outside / "target.py").read_text() == GOOD_FIXED
    assert entries(outside) == ["target.py"] and entries(project) == [".mplint.yaml", "good.py", "link.py"]
    assert sorted(d["path"] for d in doc["fixed"]) == ["good.py", "link.py"]


def test_symlink_and_its_target_in_the_same_tree_are_fixed_once(project, capsys):
    os.symlink("good.py", project / "alias.py")
    code, doc = run_json(capsys, ".", "--fix")
    assert code == 0, doc["errors"]
    assert (project / "alias.py").is_symlink() and (project / "good.py").read_text() == GOOD_FIXED


def test_hard_links_stay_one_file(project, capsys):
    outside = project.parent / "outside"
    outside.mkdir()
    os.link(project / "good.py", outside / "same.py")
    inode = (project / "good.py").stat().st_ino
    code, doc = run_json(capsys, ".", "--fix")
    assert code == 0, doc["errors"]
    info = (project / "good.py").stat()
    assert (info.st_ino, info.st_nlink) == (inode, 2)
    assert (outside / "same.py").read_text() == GOOD_FIXED
    assert entries(project) == [".mplint.yaml", "good.py"] and entries(outside) == ["same.py"]


def test_hard_linked_file_edited_during_the_run_keeps_the_edit(tmp_path):
    target = tmp_path / "mod.py"
    target.write_bytes(b"x = 'edit'\n")
    os.link(target, tmp_path / "other.py")
    with pytest.raises(FileChangedError):
        write_atomic(target, b"x = 2\n", expected=b"x = 1\n")
    assert target.read_bytes() == b"x = 'edit'\n" and entries(tmp_path) == ["mod.py", "other.py"]


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_mode_owner_and_group_are_kept(project, capsys):
    path = project / "good.py"
    os.chown(path, 1234, 4321)
    path.chmod(0o2664)  # setgid survives too
    inode = path.stat().st_ino
    code, doc = run_json(capsys, ".", "--fix")
    assert code == 0, doc["errors"]
    info = path.stat()
    assert path.read_text() == GOOD_FIXED
    assert (info.st_uid, info.st_gid, info.st_mode & 0o7777) == (1234, 4321, 0o2664)
    assert info.st_ino != inode  # replaced atomically, not rewritten in place


def test_file_whose_owner_cannot_be_kept_is_rewritten_in_place(tmp_path, monkeypatch):
    """A group-writable file of another user: replacing it would make it ours, so it is rewritten where it is."""
    target = tmp_path / "mod.py"
    target.write_bytes(b"x = 1\n")
    inode = target.stat().st_ino

    def refuse(*_):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(writer, "_same_owner", lambda fd, info: False)
    monkeypatch.setattr(os, "fchown", refuse)
    assert write_atomic(target, b"x = 2\n", expected=b"x = 1\n")
    assert target.read_bytes() == b"x = 2\n" and target.stat().st_ino == inode
    assert entries(tmp_path) == ["mod.py"]


def test_in_place_rewrite_that_fails_keeps_the_old_bytes(tmp_path, monkeypatch):
    target = tmp_path / "mod.py"
    target.write_bytes(b"x = 1\n")
    os.link(target, tmp_path / "other.py")
    overwrite = writer._overwrite
    calls = []

    def full_disk_once(handle, data):
        calls.append(data)
        if len(calls) == 1:
            handle.seek(0)
            handle.write(data[:3])
            raise OSError(28, "No space left on device")
        overwrite(handle, data)

    monkeypatch.setattr(writer, "_overwrite", full_disk_once)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(target, b"x = 2222\n", expected=b"x = 1\n")
    assert target.read_bytes() == b"x = 1\n" and entries(tmp_path) == ["mod.py", "other.py"]


# -- temporary files of an interrupted run --------------------------------------------------


def leftover(folder: Path, name: str, age: float) -> Path:
    path = folder / name
    path.write_bytes(b"partial")
    then = time.time() - age
    os.utime(path, (then, then))
    return path


def test_fix_removes_stale_temporaries_and_reports_the_others(project, capsys):
    stale = leftover(project, ".good.py.k3j2h1.mplint-tmp", age=3600)
    fresh = leftover(project, ".good.py.a1b2c3.mplint-tmp", age=0)
    backup = leftover(project, ".good.py.z9y8x7.orig.mplint-tmp", age=3600)
    code, doc = run_json(capsys, ".", "--fix")
    assert code == 0
    assert doc["notices"] == [
        ".good.py.a1b2c3.mplint-tmp: temporary file of a write in progress (another mplint run?); left alone",
        ".good.py.k3j2h1.mplint-tmp: removed a temporary file left by an interrupted run",
        ".good.py.z9y8x7.orig.mplint-tmp: backup of good.py left by an interrupted in-place rewrite; "
        "good.py may be partly written: compare the two, then delete the backup",
    ]
    assert not stale.exists() and fresh.exists() and backup.exists()


def test_check_without_fix_reports_stale_temporaries_and_removes_nothing(project, capsys):
    stale = leftover(project, ".good.py.k3j2h1.mplint-tmp", age=3600)
    assert main(["."]) == 1
    out = capsys.readouterr().out
    assert (
        "note: .good.py.k3j2h1.mplint-tmp: temporary file left by an interrupted run; the next --fix removes it\n"
        in out
    )
    assert stale.exists()


def test_notices_in_github_and_sarif(project, capsys):
    leftover(project, ".good.py.k3j2h1.mplint-tmp", age=3600)
    main([".", "--format", "github"])
    assert (
        "::notice title=mplint::.good.py.k3j2h1.mplint-tmp: temporary file left by an interrupted run; "
        "the next --fix removes it\n" in capsys.readouterr().out
    )
    main([".", "--format", "sarif"])
    [run] = json.loads(capsys.readouterr().out)["runs"]
    assert run["invocations"][0]["toolExecutionNotifications"] == [
        {
            "level": "note",
            "message": {
                "text": ".good.py.k3j2h1.mplint-tmp: temporary file left by an interrupted run; the next --fix removes it"
            },
        }
    ]
    assert run["invocations"][0]["executionSuccessful"] is True
