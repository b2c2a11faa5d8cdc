"""Run a command in a private view of the file system: ``python -m mplint.verify.isolate BASE -- COMMAND...``.

In a new mount namespace (and user namespace, when not root) every writable mount is covered by an
overlay whose upper layer lies in ``BASE/layers``, and ``BASE/scratch`` is bound at its own path. The
command then reads every file where it is, and whatever it writes outside the scratch folder, by any
API (Python, TensorFlow's C++ file system, HDF5, mmap), lands in an upper layer: the user's files
cannot change. The command cannot unmount the view: without root it has no privilege left after exec,
and root loses CAP_SYS_ADMIN (from its bounding set, so for good). Linux only; where it cannot be had, this exits with status
``UNAVAILABLE`` after writing the reason to ``BASE/scratch/isolation-error.txt``.

Imports only the standard library and runs before the command starts threads (a requirement of
``unshare(CLONE_NEWUSER)``)."""

from __future__ import annotations

import ctypes
import json
import os
import platform
import shutil
import stat
import sys
from pathlib import Path

UNAVAILABLE = 97
CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_CAPBSET_DROP, CAP_SYS_ADMIN, CAP_CHECKPOINT_RESTORE = 24, 21, 40
# What root loses in the view: mounting and unmounting, and opening the files its process mapped before it
# entered the view through /proc/self/map_files (real files, outside the overlays)
DROPPED_FOR_ROOT = (CAP_SYS_ADMIN, CAP_CHECKPOINT_RESTORE)
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
CAPABILITY_VERSION_3 = 0x20080522
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "ppc64le": 203, "s390x": 217}
# Kernel file systems: bound as they are (no user files live there).
PSEUDO = {
    "proc",
    "sysfs",
    "devtmpfs",
    "devpts",
    "mqueue",
    "cgroup",
    "cgroup2",
    "securityfs",
    "debugfs",
    "tracefs",
    "bpf",
    "pstore",
    "hugetlbfs",
    "binfmt_misc",
    "autofs",
    "configfs",
    "fusectl",
    "efivarfs",
    "nsfs",
    "rpc_pipefs",
    "selinuxfs",
}
_FLAG_OPTIONS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC}


class Unavailable(Exception):
    pass


_libc = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise Unavailable(f"{what}: {os.strerror(errno)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    encode = lambda s: None if s is None else os.fsencode(s)  # noqa: E731
    _check(
        _libc.mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(data)),
        f"mount {fstype or 'bind'} {source} on {target}",
    )


def _unshare(flags: int) -> None:
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def _write(path: str, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)


def _map_ids(uid: int, gid: int) -> None:
    """Map the caller's own ids (the one mapping an unprivileged process may write)."""
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")


def _unescape(field: str) -> str:
    return field.encode().decode("unicode_escape").encode("latin-1").decode("utf-8", "surrogateescape")


def mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, file-system type, mount options) of what each path resolves to, parents first."""
    entries = {}
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            fields = line.split()
            tail = fields.index("-")
            entries[fields[0]] = (fields[1], _unescape(fields[4]), fields[tail + 1], set(fields[5].split(",")))
    ordered, seen = [], set()

    def visit(mount_id):  # parents before children; of mounts stacked on one path the last wins
        seen.add(mount_id)
        ordered.append(mount_id)
        for child, entry in entries.items():
            if entry[0] == mount_id and child not in seen:
                visit(child)

    for mount_id, entry in entries.items():
        if entry[0] not in entries and mount_id not in seen:
            visit(mount_id)
    top = {}
    for mount_id in ordered:
        _, point, fstype, options = entries[mount_id]
        top[point] = (fstype, options)
    return sorted(((p, t, o) for p, (t, o) in top.items()), key=lambda m: (m[0].count("/") if m[0] != "/" else 0, m[0]))


def _escape_option(path: str) -> str:
    return path.replace("\\", "\\\\").replace(",", "\\,").replace(":", "\\:")


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


COPIED_FILE_LIMIT = 1 << 20


class _Builder:
    """Mounts the private tree at ``BASE/root``. A directory with no mount below it gets one overlay; one
    with mounts below is recreated (its small files copied, the rest bound read-only) and its entries
    placed one by one, since an unprivileged overlay cannot take a lower layer with mounts inside.
    Kernel file systems (and read-only mounts) are bound with everything below them; ``/dev/shm`` is a
    fresh tmpfs."""

    def __init__(self, base: str, unprivileged: bool):
        self.layers, self.root = os.path.join(base, "layers"), os.path.join(base, "root")
        self.unprivileged = unprivileged
        self.mounts = {point: (fstype, options) for point, fstype, options in mounts()}
        self.index: dict[str, str] = {}  # upper layer number -> the path it overlays
        self.recreated: dict[str, int | None] = {}  # what the tree recreates -> its mtime (ns); None: a folder

    def build(self) -> None:
        _mount(self.root, self.root, None, MS_BIND)  # a mount point, for pivot_root
        self.place("/")
        with open(os.path.join(self.layers, "index.json"), "w") as fh:
            json.dump({"overlays": self.index, "recreated": self.recreated}, fh)

    def target(self, path: str) -> str:
        return self.root + path if path != "/" else self.root

    def place(self, path: str) -> None:
        fstype, options = self.mounts.get(path, (None, set()))
        target = self.target(path)
        if path == "/dev/shm":
            _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
        elif fstype in PSEUDO or "ro" in options:
            self.bind_subtree(path, fstype, options)
        elif not any(_inside(point, path) and point != path for point in self.mounts):
            self.overlay(path)
        else:
            try:
                entries = sorted(os.listdir(path))
            except PermissionError:  # the caller could neither read nor write there
                entries = []
            for entry in entries:
                self.place_entry(os.path.join(path, entry))

    def place_entry(self, path: str) -> None:
        target = self.target(path)
        if path == self.root:
            return
        if os.path.islink(path):
            os.symlink(os.readlink(path), target)
        elif os.path.isdir(path):
            os.mkdir(target, 0o700)
            self.place(path)
            if not os.path.ismount(target):
                os.chmod(target, os.stat(path).st_mode & 0o7777)
            self.recreated[path] = None
            return
        elif os.path.isfile(path):
            if os.path.getsize(path) <= COPIED_FILE_LIMIT and os.access(path, os.R_OK):
                shutil.copy2(path, target)
            else:  # too large to copy: writing it fails (read-only) rather than reaching the user's file
                open(target, "w").close()
                self.recreated[path] = os.lstat(target).st_mtime_ns
                _mount(path, target, None, MS_BIND)
                _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY)
                return
        else:
            return  # sockets, fifos and device nodes outside /dev are left out
        self.recreated[path] = os.lstat(target).st_mtime_ns

    def bind_subtree(self, path: str, fstype: str, options: set[str]) -> None:
        target = self.target(path)
        _mount(path, target, None, MS_BIND | MS_REC)
        if "ro" in options:
            flags = sum(flag for name, flag in _FLAG_OPTIONS.items() if name in options)
            _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags)
        if path == "/dev" and "/dev/shm" in self.mounts:
            self.place("/dev/shm")

    def overlay(self, path: str) -> None:
        number = str(len(self.index))
        upper, work = os.path.join(self.layers, number, "upper"), os.path.join(self.layers, number, "work")
        os.makedirs(upper)
        os.makedirs(work)
        options = f"lowerdir={_escape_option(path)},upperdir={_escape_option(upper)},workdir={_escape_option(work)}"
        if self.unprivileged:
            options += ",userxattr"  # trusted.* xattrs need real privilege
        _mount("overlay", self.target(path), "overlay", 0, options)
        self.index[number] = path


def _pivot(root: str, cwd: str) -> None:
    number = SYS_PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise Unavailable(f"pivot_root is not known on {platform.machine()}")
    os.chdir(root)
    _check(_libc.syscall(ctypes.c_long(number), b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", ctypes.c_int(MNT_DETACH)), "umount of the old root")
    os.chdir(cwd)


def enter(base: str) -> None:
    """Put this process in the private tree built under ``base``."""
    if sys.platform != "linux":
        raise Unavailable(f"it needs Linux mount namespaces, and this is {sys.platform}")
    cwd = os.getcwd()
    uid, gid = os.geteuid(), os.getegid()
    _unshare(CLONE_NEWNS if uid == 0 else CLONE_NEWNS | CLONE_NEWUSER)
    if uid != 0:
        _map_ids(uid, gid)
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing mounted here shows outside
    _Builder(base, unprivileged=uid != 0).build()
    _mount(os.path.join(base, "scratch"), os.path.join(base, "root") + os.path.join(base, "scratch"), None, MS_BIND)
    _pivot(os.path.join(base, "root"), cwd)
    if uid == 0:  # root would keep the privilege to unmount after exec: drop it from the bounding set
        _check(
            _libc.prctl(ctypes.c_int(PR_CAPBSET_DROP), ctypes.c_ulong(CAP_SYS_ADMIN), 0, 0, 0), "dropping CAP_SYS_ADMIN"
        )
        # CAP_CHECKPOINT_RESTORE exists from Linux 5.9; before, map_files needs CAP_SYS_ADMIN, dropped above
        _libc.prctl(ctypes.c_int(PR_CAPBSET_DROP), ctypes.c_ulong(CAP_CHECKPOINT_RESTORE), 0, 0, 0)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_privileges() -> None:
    """After ``enter``: an unprivileged caller keeps no capability of its new user namespace; root keeps all but
    ``DROPPED_FOR_ROOT``, in every set (inheritable and ambient too, so that no exec gives them back). A warm
    start's child (warm.py), which goes on without exec, then holds what exec would have left it; before an exec
    (``main``) it closes root's way back through an inheritable set it came with."""
    header, data = _CapHeader(CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    _check(_libc.capget(ctypes.byref(header), data), "reading capabilities")
    for word in data:
        if os.geteuid() != 0:
            word.effective = word.permitted = word.inheritable = 0
    for capability in DROPPED_FOR_ROOT:
        word, mask = data[capability // 32], ~(1 << (capability % 32)) & 0xFFFFFFFF
        word.effective &= mask
        word.permitted &= mask
        word.inheritable &= mask
    _check(_libc.capset(ctypes.byref(header), data), "dropping capabilities")
    _libc.prctl(ctypes.c_int(PR_CAP_AMBIENT), ctypes.c_ulong(PR_CAP_AMBIENT_CLEAR_ALL), 0, 0, 0)


# The parent's side: the layout of BASE, and what the command left in it.


def make_layout(base: Path) -> None:
    for name in ("scratch", "layers", "root"):
        (base / name).mkdir()


def remove_layout(base: Path) -> None:
    """Remove ``base``, including the overlays' work directories (mode 000)."""

    def retry(_function, path, _exc):  # the failed call may be os.open (with flags): not called again as is
        try:
            os.chmod(os.path.dirname(path), 0o700)
            os.chmod(path, 0o700)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, **handler)
            else:
                os.unlink(path)
        except OSError:
            pass

    handler = {"onexc": retry} if sys.version_info >= (3, 12) else {"onerror": retry}
    shutil.rmtree(base, **handler)


def writes_outside(base: Path) -> list[str]:
    """What the command run under ``base`` wrote outside its scratch folder, from the overlays' upper
    layers and the recreated tree: the absolute path of each file written or created (or of each new
    empty folder), and of each one it deleted."""
    layers, root = base / "layers", base / "root"
    try:
        index = json.loads((layers / "index.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    written = []
    for number, mount in index["overlays"].items():
        upper = layers / number / "upper"
        for path in _leaves(upper):
            info = os.lstat(path)
            whiteout = stat.S_ISCHR(info.st_mode) and info.st_rdev == 0
            real = os.path.join(mount, os.path.relpath(path, upper))
            written.append(f"{real} (deleted)" if whiteout else real)
    # after the run nothing is mounted under root: what is left there is the recreated tree
    recreated = index["recreated"]
    overlaid = {os.path.join(root, m.lstrip("/")) for m in index["overlays"].values()}
    for path in _leaves(root, skip=overlaid):
        real = "/" + os.path.relpath(path, root)
        if real not in recreated or recreated[real] not in (None, os.lstat(path).st_mtime_ns):
            written.append(real)
    written.extend(f"{path} (deleted)" for path in recreated if not os.path.lexists(os.path.join(root, path[1:])))
    return sorted(written)


def _leaves(folder: Path, skip=frozenset()) -> list[str]:
    """Files, links and empty folders under ``folder``, not entering those in ``skip``."""
    found = []
    for parent, dirs, files in os.walk(folder):
        paths = [os.path.join(parent, d) for d in dirs]
        links = [p for p in paths if os.path.islink(p)]
        dirs[:] = [os.path.basename(p) for p in paths if p not in skip and p not in links]
        found.extend([*links, *(os.path.join(parent, name) for name in files)])
        found.extend(path for d in dirs if not os.listdir(path := os.path.join(parent, d)))
    return found


def main(argv: list[str]) -> None:
    base, command = argv[0], argv[argv.index("--") + 1 :]
    try:
        enter(base)
        drop_privileges()
    except (Unavailable, OSError) as exc:
        _write(os.path.join(base, "scratch", "isolation-error.txt"), str(exc))
        sys.exit(UNAVAILABLE)
    os.execv(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
