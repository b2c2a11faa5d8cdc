"""Warm starts: one interpreter imports the framework once, and each run of the script is a fork of it.

Importing TensorFlow takes 3-4 s, more than a capped run trains, and ``mplint verify --fix`` runs the script
three times. A *warm* interpreter, started with the runs' environment, imports the framework (TensorFlow, torch, or
Keras 3 on its JAX or torch backend; nothing of the script) and waits; each run is a child forked from it that does
what a fresh ``isolate`` + ``bootstrap`` process pair does: a new session, its own output files and environment, the private
view of the file system (``isolate.enter``: a fork has one thread, as ``unshare(CLONE_NEWUSER)`` requires),
every privilege that view gave it dropped (no exec follows to drop them), then the bootstrap, whose hooks are
installed on the modules already imported. The child ends with ``os._exit``: nothing of the warm interpreter's
clean-up runs in it.

Used only where a fork is as faithful as a fresh start (``usable``): an isolated run with no memory cap (the
cap would count the warm interpreter's import), on a machine with no accelerator device visible (the frameworks
do not support a fork once a device runtime is loaded, and an import may load one). Elsewhere, or when the warm
interpreter cannot start, the run starts fresh.

Requests and replies are JSON lines on the warm interpreter's stdin and a duplicate of its stdout (its own
stdout and stderr go to a log, so that the framework's import chatter cannot mix in)."""

from __future__ import annotations

import atexit
import glob
import importlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# What a warm interpreter imports for each framework setting of RunOptions (``setting``): Keras 3 on JAX or torch
# imports its backend itself (KERAS_BACKEND is in the runs' environment), and never TensorFlow.
IMPORTS = {"keras": "tensorflow", "torch": "torch", "keras-jax": "keras", "keras-torch": "keras"}
# Device files of accelerators whose runtimes do not survive a fork (NVIDIA, AMD ROCm, WSL's GPU, TPU/VFIO).
DEVICE_PATTERNS = ("/dev/nvidia*", "/dev/kfd", "/dev/dxg", "/dev/accel*", "/dev/vfio/*")
# Per run, not per warm interpreter: the run's scratch folders (below, a warm interpreter's own).
PER_RUN_ENV = ("TMPDIR", "KERAS_HOME")
# Variables that change from run to run and that no framework reads at import: set in the child only.
NOT_AT_IMPORT = (*PER_RUN_ENV, "PYTEST_CURRENT_TEST")  # pytest names the test running in it
KEPT = 3  # warm interpreters kept at once (each holds a framework in memory)


def run_python(
    argv: list[str], *, module: str, cwd: str | Path | None = None, env: dict[str, str] | None = None, timeout=300.0
) -> subprocess.CompletedProcess:
    """``subprocess.run([python, *argv], capture_output=True, text=True)`` for a script (``argv[0]``, or ``-c CODE``)
    that imports ``module``: run as a fork of a warm interpreter that imported it once, where warm starts are
    used (else as that subprocess). Not isolated and not instrumented: for executed tests of fixes. Unlike a fresh
    interpreter, the program ends with ``os._exit`` once its stdout and stderr are flushed: atexit handlers,
    non-daemon threads still running and the buffers of files left unclosed are not finished, and its hash seed
    is the warm interpreter's. Programs whose result depends on those run with ``subprocess``."""
    env = dict(os.environ if env is None else env)
    cwd = str(Path(cwd or os.getcwd()).resolve())
    command = [sys.executable, *argv]
    if sys.platform == "linux" and not accelerator_visible():
        with tempfile.TemporaryDirectory(prefix="mplint-run-") as folder:
            out, err = Path(folder, "stdout.txt"), Path(folder, "stderr.txt")
            request = {"argv": argv, "cwd": cwd, "env": env, "stdout": str(out), "stderr": str(err)}
            try:
                status, timed_out = warm_for(module, env).run(request, timeout)
            except WarmStartFailed:  # nothing ran: run it fresh, below
                forget(module, env)
            else:
                if timed_out:
                    raise subprocess.TimeoutExpired(command, timeout)
                if status is None:
                    forget(module, env)
                text = [p.read_text(encoding="utf-8", errors="replace") if p.exists() else "" for p in (out, err)]
                return subprocess.CompletedProcess(command, -1 if status is None else status, *text)
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def setting(framework: str, backend: str) -> str:
    """The key of ``IMPORTS`` for a run of ``framework`` ("keras" or "torch") on Keras 3's ``backend``."""
    return framework if framework == "torch" or backend == "tensorflow" else f"keras-{backend}"


def kill_group(pid: int) -> None:
    """Kill the session (process group) led by ``pid``: a run and whatever it left behind."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def accelerator_visible() -> bool:
    return any(glob.glob(pattern) for pattern in DEVICE_PATTERNS)


def usable(isolated: bool, memory_limit_mb: int | None) -> bool:
    return sys.platform == "linux" and isolated and not memory_limit_mb and not accelerator_visible()


class WarmStartFailed(Exception):
    pass


class Warm:
    """A warm interpreter that imported ``module`` with one environment (less the per-run folders)."""

    def __init__(self, module: str, env: dict[str, str]):
        self.home = Path(tempfile.mkdtemp(prefix="mplint-warm-")).resolve()
        for name in PER_RUN_ENV:
            (self.home / name.lower()).mkdir()
        own_env = dict(env, **{name: str(self.home / name.lower()) for name in PER_RUN_ENV})
        self.log = open(self.home / "log.txt", "wb")  # noqa: SIM115 - kept open for the process's life
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mplint.verify.warm", module],
            cwd=self.home,
            env=own_env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            start_new_session=True,
            bufsize=0,  # unbuffered: a reply read is never left in a buffer that select cannot see
        )
        try:
            reply = self._read(timeout=120.0)
        except WarmStartFailed:
            reply = None
        if not reply or not reply.get("ready"):
            error = (reply or {}).get("error") or self._log_tail()
            self.close()
            raise WarmStartFailed(error)

    def _log_tail(self) -> str:
        try:
            return (self.home / "log.txt").read_text(encoding="utf-8", errors="replace")[-500:]
        except OSError:
            return "the warm interpreter exited"

    def _read(self, timeout: float | None) -> dict | None:
        """The next reply; None when none came within ``timeout`` s; raises WarmStartFailed at its end."""
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return None
        line = self.proc.stdout.readline()
        if not line:
            raise WarmStartFailed("the warm interpreter exited")
        return json.loads(line)

    def run(self, request: dict, timeout: float) -> tuple[int | None, bool]:
        """Fork a child for ``request`` (see ``_child``) and wait for it, at most ``timeout`` s; whatever it left
        behind (its session) is killed when it ends or times out. Returns (exit status, timed out); the status is
        None when the warm interpreter went away during the run. Raises WarmStartFailed when it did not fork."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
        except OSError as exc:
            raise WarmStartFailed(f"the warm interpreter exited ({exc})") from exc
        started = self._read(timeout=60.0)
        if not started or "pid" not in started:
            self.proc.kill()  # out of step: never used again (warm_for replaces it)
            raise WarmStartFailed(f"the warm interpreter did not fork ({started})")
        pid = started["pid"]
        deadline = time.monotonic() + timeout
        done: dict | None = None
        timed_out = False
        try:
            done = self._read(timeout=max(0.0, deadline - time.monotonic()))
            timed_out = done is None
            if timed_out:
                kill_group(pid)
                done = self._read(timeout=60.0)
        except WarmStartFailed:
            done = None
        finally:
            kill_group(pid)
        if not done or "status" not in done:
            self.proc.kill()  # gone, or out of step: never used again (warm_for replaces it)
            return None, timed_out
        return done["status"], timed_out

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()
        self.log.close()
        shutil.rmtree(self.home, ignore_errors=True)


_kept: dict[tuple, Warm] = {}


def _key(module: str, env: dict[str, str]) -> tuple:
    return (module, tuple(sorted((k, v) for k, v in env.items() if k not in NOT_AT_IMPORT)))


def warm_for(module: str, env: dict[str, str]) -> Warm:
    """The warm interpreter that imported ``module`` with ``env`` (started on first use, kept for the next runs)."""
    warm = _kept.pop(_key(module, env), None)
    if warm is not None and not warm.alive():
        warm.close()
        warm = None
    if warm is None:
        while len(_kept) >= KEPT:
            _kept.pop(next(iter(_kept))).close()
        warm = Warm(module, env)
    _kept[_key(module, env)] = warm  # most recently used last
    return warm


def forget(module: str, env: dict[str, str]) -> None:
    warm = _kept.pop(_key(module, env), None)
    if warm is not None:
        warm.close()


@atexit.register
def _close_all() -> None:
    while _kept:
        _kept.popitem()[1].close()


# The warm interpreter's side.


def _child(request: dict, replies: int, started: int) -> None:
    """In the forked child: a new session with the run's output files, folder and environment, then the request's
    run (``_verify_run`` or ``_script_run``). Never returns."""
    code = 1
    try:
        os.setsid()
        os.close(started)
        os.close(replies)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        for fd, name in ((1, "stdout"), (2, "stderr")):
            target = os.open(request[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(target, fd)
            os.close(target)
        sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115 - the protocol's buffer stays behind
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None  # read TMPDIR again
        _rehome_keras(request["env"].get("KERAS_HOME"))
        code = _script_run(request["argv"]) if "argv" in request else _verify_run(request)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - exiting anyway
                pass
        os._exit(code)


def _verify_run(request: dict) -> int:
    """What ``isolate BASE -- python -m mplint.verify.bootstrap CONFIG`` would be once the script imports the
    framework."""
    from mplint.verify import bootstrap, isolate

    try:
        isolate.enter(request["base"])
        isolate.drop_privileges()
    except (isolate.Unavailable, OSError) as exc:
        with open(os.path.join(request["base"], "scratch", "isolation-error.txt"), "w") as fh:
            fh.write(str(exc))
        return isolate.UNAVAILABLE
    bootstrap.main(request["config"])  # ends the process (Recorder.finish)
    return 0


def _script_run(argv: list[str]) -> int:
    """What ``python SCRIPT ARGS...`` or ``python -c CODE ARGS...`` would be once the script imports the
    warm interpreter's module: no isolation, no instrumentation (executed tests; see run_python)."""
    import runpy

    if argv[0] == "-c":
        sys.argv = ["-c", *argv[2:]]
        sys.path[0] = ""
        module = type(sys)("__main__")
        sys.modules["__main__"] = module
        exec(compile(argv[1], "<string>", "exec"), module.__dict__)  # noqa: S102 - the caller's own program
    else:
        sys.argv = list(argv)
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
        runpy.run_path(argv[0], run_name="__main__")
    return 0


def _rehome_keras(home: str | None) -> None:
    """Keras reads ``KERAS_HOME`` once, at its import: point it at the run's folder."""
    if not home:
        return
    config = sys.modules.get("keras.src.backend.config")
    if config is not None and hasattr(config, "_KERAS_DIR"):
        setattr(config, "_KERAS_DIR", home)  # noqa: B010 - a private name mypy cannot see
    legacy = sys.modules.get("tf_keras.src.backend")
    if legacy is not None and hasattr(legacy, "_keras_dir"):
        setattr(legacy, "_keras_dir", home)  # noqa: B010


def serve(module: str) -> None:
    replies = os.dup(1)
    log = os.dup(2)
    os.dup2(log, 1)  # the import's chatter goes to the log, never into the replies
    os.close(log)
    out = os.fdopen(replies, "w", buffering=1, encoding="utf-8")

    def reply(message: dict) -> None:
        out.write(json.dumps(message) + "\n")
        out.flush()

    try:
        importlib.import_module(module)
        import mplint.verify.bootstrap  # noqa: F401 - and the instrumentation, once
    except BaseException as exc:  # noqa: BLE001 - reported to the caller, which then starts runs fresh
        reply({"ready": False, "error": f"{type(exc).__name__}: {exc}"})
        return
    reply({"ready": True})
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        in_session, started = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(in_session)
            _child(request, replies, started)
        os.close(started)
        os.read(in_session, 1)  # end of file once the child leads its session (or died): killpg reaches it
        os.close(in_session)
        reply({"pid": pid})
        _, status = os.waitpid(pid, 0)
        reply({"status": os.waitstatus_to_exitcode(status)})


if __name__ == "__main__":
    serve(sys.argv[1])
