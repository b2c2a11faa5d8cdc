"""``mplint verify`` runs the script in a private view of the file system: whatever API a script writes,
deletes or renames with, at absolute paths or under ``$HOME``, the user's files stay byte-identical, the
script still reads back what it wrote, and the report lists each path it wrote outside its scratch folder.
Real subprocesses (TensorFlow and PyTorch on CPU)."""

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import mplint
from mplint.verify import cli, isolate
from mplint.verify.cli import main
from mplint.verify.runner import isolation_problem, isolation_refusal

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the private view needs Linux namespaces")

# Each write goes to USER (the script's argument), outside the script's folder; every one is read back.
KERAS_WRITERS = """import os, pathlib, shutil, subprocess, sys
import h5py
import keras
import numpy as np
import tensorflow as tf

user = pathlib.Path(sys.argv[1])
open(user / "open.txt", "w").write("open")
with open(user / "existing.txt", "a") as fh:
    fh.write(" appended")
fd = os.open(user / "os_open.txt", os.O_WRONLY | os.O_CREAT)
os.write(fd, b"os.open")
os.close(fd)
(user / "touched").touch()
(user / "pathlib.txt").write_text("pathlib")
os.makedirs(user / "made" / "dirs")
shutil.copy(user / "existing.txt", user / "copied.txt")
np.save(user / "array.npy", np.arange(3))
memmap = np.memmap(user / "memmap.bin", mode="w+", shape=(4,), dtype="uint8")
memmap[:] = 7
memmap.flush()
del memmap
with h5py.File(user / "file.h5", "w") as h5:
    h5["x"] = np.arange(2)
tf.io.gfile.makedirs(str(user / "gfile_dir" / "sub"))
with tf.io.gfile.GFile(str(user / "gfile.txt"), "w") as fh:
    fh.write("gfile")
tf.io.write_file(str(user / "write_file.txt"), "write_file")
checkpoint = tf.train.Checkpoint(v=tf.Variable(1.0))
tf.train.CheckpointManager(checkpoint, str(user / "ckpts"), max_to_keep=1).save()
with tf.summary.create_file_writer(str(user / "summaries")).as_default():
    tf.summary.write("x", tf.constant(1.0), step=0)  # tf.summary.scalar needs TensorBoard installed
subprocess.run(["sh", "-c", f"echo subprocess > {user}/subprocess.txt"], check=True)
os.remove(user / "to_delete.txt")
os.rename(user / "to_rename.txt", user / "renamed.txt")
shutil.rmtree(user / "tree")
pathlib.Path(os.path.expanduser("~/home.txt")).write_text("home")

model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(8), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
model.fit(np.ones((32, 4), "float32"), np.ones((32, 1), "float32"), batch_size=8, epochs=1,
          callbacks=[keras.callbacks.ModelCheckpoint(str(user / "best.keras"))])
model.save(user / "model.keras")
model.save_weights(str(user / "model.weights.h5"))

# the script sees its own writes
assert (user / "open.txt").read_text() == "open"
assert (user / "existing.txt").read_text() == "original appended" == (user / "copied.txt").read_text()
assert (user / "os_open.txt").read_text() == "os.open" and (user / "touched").exists()
assert (user / "made" / "dirs").is_dir() and (user / "gfile_dir" / "sub").is_dir()
assert np.load(user / "array.npy").tolist() == [0, 1, 2]
assert (user / "memmap.bin").read_bytes() == bytes([7] * 4)
with h5py.File(user / "file.h5", "r") as h5:
    assert h5["x"][()].tolist() == [0, 1]
assert tf.io.read_file(str(user / "write_file.txt")).numpy() == b"write_file"
assert (user / "gfile.txt").read_text() == "gfile"
assert tf.train.latest_checkpoint(str(user / "ckpts")) == str(user / "ckpts" / "ckpt-1")
assert os.listdir(user / "summaries")
assert (user / "subprocess.txt").read_text() == "subprocess\\n"
assert not (user / "to_delete.txt").exists() and not (user / "tree").exists()
assert (user / "renamed.txt").read_text() == "rename me"
assert keras.models.load_model(user / "model.keras").count_params() == model.count_params()
assert (user / "best.keras").exists() and (user / "model.weights.h5").exists()
"""

TORCH_WRITERS = """import os, pathlib, sys
import torch

user = pathlib.Path(sys.argv[1])
model = torch.nn.Linear(4, 1)
torch.save(model.state_dict(), user / "model.pt")
torch.save(model.state_dict(), str(user / "model_str.pt"))
torch.save(model, user / "legacy.pt", _use_new_zipfile_serialization=False)
with open(user / "model_fh.pt", "wb") as fh:
    torch.save({"step": 3}, fh)
os.replace(user / "to_rename.txt", user / "existing.txt")
assert torch.load(user / "model.pt")["weight"].shape == (1, 4)
assert torch.load(str(user / "model_str.pt"))["bias"].shape == (1,)
assert torch.load(user / "model_fh.pt") == {"step": 3}
assert (user / "existing.txt").read_text() == "rename me"
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):  # the step cap (2) ends the run here
    optimizer.zero_grad()
    model(torch.ones(8, 4)).square().mean().backward()
    optimizer.step()
"""


def snapshot(root: Path) -> dict:
    """Every file, folder and link under ``root``: bytes, link targets and modes."""
    found = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        kind = os.readlink(path) if path.is_symlink() else path.read_bytes() if path.is_file() else "folder"
        found[str(path.relative_to(root))] = (kind, stat.S_IMODE(info.st_mode), info.st_mtime_ns)
    return found


def user_tree(tmp_path: Path) -> Path:
    user = tmp_path / "user"
    (user / "tree" / "sub").mkdir(parents=True)
    (user / "tree" / "sub" / "kept.txt").write_text("tree")
    (user / "existing.txt").write_text("original")
    (user / "to_delete.txt").write_text("delete me")
    (user / "to_rename.txt").write_text("rename me")
    return user


def run_verify(capsys, tmp_path, monkeypatch, text: str):
    home, user = tmp_path / "home", user_tree(tmp_path)
    home.mkdir()
    (home / ".profile").write_text("home")
    script = tmp_path / "project" / "train.py"
    script.parent.mkdir()
    script.write_text(text)
    monkeypatch.setenv("HOME", str(home))
    before = snapshot(tmp_path)
    code = main([str(script), "--steps", "2", "--format", "json", "--", str(user)])
    doc = json.loads(capsys.readouterr().out)
    assert snapshot(tmp_path) == before  # the user's tree, $HOME and the script's folder
    return code, doc, user, home


def relative(written: list[str], **roots: Path) -> list[str]:
    for name, root in roots.items():
        written = [w.replace(str(root), name) for w in written]
    return written


@pytest.mark.tensorflow
def test_no_write_api_of_a_keras_script_reaches_the_users_files(capsys, tmp_path, monkeypatch):
    pytest.importorskip("tensorflow")
    pytest.importorskip("h5py")
    code, doc, user, home = run_verify(capsys, tmp_path, monkeypatch, KERAS_WRITERS)
    assert code == 0, doc.get("error")
    written = relative(doc["events"]["writes_redirected"], USER=user, HOME=home)
    summaries = [w for w in written if w.startswith("USER/summaries/events.out.tfevents.")]
    assert len(summaries) == 2  # one per run: the mixed run and the float32 reference
    assert [w for w in written if w not in summaries] == [
        "HOME/home.txt",
        "USER/array.npy",
        "USER/best.keras",
        "USER/ckpts/checkpoint",
        "USER/ckpts/ckpt-1.data-00000-of-00001",
        "USER/ckpts/ckpt-1.index",
        "USER/copied.txt",
        "USER/existing.txt",
        "USER/file.h5",
        "USER/gfile.txt",
        "USER/gfile_dir/sub",
        "USER/made/dirs",
        "USER/memmap.bin",
        "USER/model.keras",
        "USER/model.weights.h5",
        "USER/open.txt",
        "USER/os_open.txt",
        "USER/pathlib.txt",
        "USER/renamed.txt",
        "USER/subprocess.txt",
        "USER/to_delete.txt (deleted)",
        "USER/to_rename.txt (deleted)",
        "USER/touched",
        "USER/tree (deleted)",
        "USER/write_file.txt",
    ]


def test_no_write_api_of_a_torch_script_reaches_the_users_files(capsys, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    code, doc, user, home = run_verify(capsys, tmp_path, monkeypatch, TORCH_WRITERS)
    assert code == 0, doc.get("error")
    assert doc["framework"] == "torch"
    assert doc["runs"]["run"]["metrics"]["steps"] == 2
    assert relative(doc["events"]["writes_redirected"], USER=user) == [
        "USER/existing.txt",
        "USER/legacy.pt",
        "USER/model.pt",
        "USER/model_fh.pt",
        "USER/model_str.pt",
        "USER/to_rename.txt (deleted)",
    ]


def isolated(base: Path, command: str, user: tuple[int, int] | None = None):
    """Run ``sh -c command`` through isolate.py in the layout run_script makes, as ``user`` (uid, gid)."""
    base.mkdir()
    isolate.make_layout(base)
    prefix = []
    if user is not None:
        for path in [base, *base.rglob("*")]:
            os.chown(path, *user)
        prefix = [shutil.which("setpriv"), f"--reuid={user[0]}", f"--regid={user[1]}", "--clear-groups"]
    env = dict(os.environ, PYTHONPATH=str(Path(mplint.__file__).parent.parent))
    return subprocess.run(
        [*prefix, sys.executable, "-m", "mplint.verify.isolate", str(base), "--", "/bin/sh", "-c", command],
        cwd=base / "scratch",
        env=env,
        capture_output=True,
        text=True,
    )


# The unmount is tried with the system call itself (through perl, which every user can run): util-linux's umount
# also creates its lock folder /run/mount where the machine has none, a write the view rightly records but that
# says nothing of the view.
UNMOUNT = """perl -e 'require "syscall.ph"; my $root = "/"; print syscall(&SYS_umount2, $root, 0) == 0 ? "unmounted\\n" : "unmount refused: $!\\n"'"""
WRITES = (
    "echo top > /top-level.txt && echo new > {user}/new.txt && echo changed >> {user}/mine.txt && rm {user}/gone.txt && mkdir {user}/made "
    "&& echo kept > {scratch}/kept.txt && cat {user}/mine.txt && ls {user} && " + UNMOUNT
)


@pytest.fixture
def shared_tmp():
    """A temporary folder that other users can reach (pytest's is private to its user)."""
    folder = Path(tempfile.mkdtemp())
    yield folder
    isolate.remove_layout(folder)


@pytest.mark.parametrize("who", ["caller", "unprivileged"])
def test_isolate_keeps_every_write_in_the_upper_layers(tmp_path, shared_tmp, who):
    owner = None
    if who == "unprivileged":  # the user-namespace branch, as a user without privilege
        if os.geteuid() != 0 or not shutil.which("setpriv"):
            pytest.skip("needs root (to become another user) and setpriv")
        owner = (65534, 65534)
        tmp_path = shared_tmp
    user = tmp_path / "user"
    user.mkdir()
    (user / "mine.txt").write_text("mine\n")
    (user / "gone.txt").write_text("gone\n")
    if owner:
        for path in [tmp_path, user, *user.iterdir()]:
            os.chown(path, *owner)
    before = snapshot(user)
    base = tmp_path / "base"
    proc = isolated(base, WRITES.format(user=user, scratch=base / "scratch"), owner)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "mine",
        "changed",
        "made",
        "mine.txt",
        "new.txt",
        "unmount refused: Operation not permitted",
    ]
    assert snapshot(user) == before
    assert (base / "scratch" / "kept.txt").read_text() == "kept\n"  # the scratch folder is the real one
    assert sorted(w.replace(str(user), "USER") for w in isolate.writes_outside(base)) == [
        "/top-level.txt",
        "USER/gone.txt (deleted)",
        "USER/made",
        "USER/mine.txt",
        "USER/new.txt",
    ]
    assert not Path("/top-level.txt").exists()  # "/" holds mounts: its entries are recreated, not overlaid
    isolate.remove_layout(base)
    assert not base.exists()


def test_isolate_refuses_with_the_reason_when_the_private_view_cannot_be_built(tmp_path):
    base = tmp_path / "base"
    for name in ("scratch", "layers"):  # no "root" to mount the private tree on
        (base / name).mkdir(parents=True)
    env = dict(os.environ, PYTHONPATH=str(Path(mplint.__file__).parent.parent))
    proc = subprocess.run(
        [sys.executable, "-m", "mplint.verify.isolate", str(base), "--", "/bin/true"], cwd=base / "scratch", env=env
    )
    assert proc.returncode == isolate.UNAVAILABLE
    assert (base / "scratch" / "isolation-error.txt").read_text() == (
        f"mount bind {base / 'root'} on {base / 'root'}: No such file or directory"
    )
    assert isolation_problem() is None  # here it can be built


def test_verify_refuses_to_run_without_a_private_view(capsys, tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    script = tmp_path / "train.py"
    script.write_text(f"open({str(marker)!r}, 'w')\n")
    reason = isolation_refusal("unshare: Operation not permitted")
    monkeypatch.setattr(cli, "isolation_problem", lambda: reason)
    assert cli.main([str(script), "--steps", "1"]) == cli.EXIT_UNVERIFIED
    assert capsys.readouterr().err == (
        "mplint verify: error: the script cannot be given a private view of the file system here (unshare: "
        "Operation not permitted), so its writes could reach your files; --no-isolation runs it anyway with "
        "writes redirected at the Python level only (open, os, shutil, Keras and TensorFlow saving), which "
        "C-level writers escape\n"
    )
    assert not marker.exists()


def test_remove_layout_removes_a_folder_it_could_not_open(tmp_path, monkeypatch):
    # an overlay's work folder is mode 000: without privilege, rmtree's os.open of it fails (as root it cannot)
    base = tmp_path / "base"
    (base / "layers" / "0" / "work" / "work").mkdir(parents=True)
    (base / "layers" / "0" / "work" / "work" / "left.txt").write_text("left")
    real_open, refused = os.open, []

    def open_refusing_work_once(path, flags, *args, **kwargs):
        if os.fsdecode(path).endswith("work") and not refused:
            refused.append(path)
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_refusing_work_once)
    isolate.remove_layout(base)
    assert refused and not base.exists()


def test_root_that_comes_with_inheritable_privileges_keeps_none_of_them_after_exec(shared_tmp):
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv")
    isolate.make_layout(shared_tmp)
    proc = subprocess.run(
        ["setpriv", "--inh-caps", "+sys_admin,+checkpoint_restore", sys.executable, "-m", "mplint.verify.isolate"]
        + [str(shared_tmp), "--", "/bin/grep", "CapEff", "/proc/self/status"],
        cwd=shared_tmp / "scratch",
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(Path(mplint.__file__).parent.parent)),
    )
    assert proc.returncode == 0, proc.stderr
    effective = int(proc.stdout.split()[1], 16)
    assert effective and not effective & (1 << isolate.CAP_SYS_ADMIN | 1 << isolate.CAP_CHECKPOINT_RESTORE)
