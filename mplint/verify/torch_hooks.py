"""Patches applied to PyTorch as the script imports it: optimizer steps counted by the global
step hooks, ``GradScaler`` steps with their scale and skipped (inf/NaN) steps, the loss of each
``backward()``, top-level modules' output dtypes by forward hooks, the dtype each op ran in inside
an autocast region (a ``TorchDispatchMode`` entered with the region), autocast/GradScaler turned
off for the float32 reference, and dataset/hub downloads blocked.

What a step's hooks learn stays a tensor on the script's device until the step is recorded, where
``torch_reads.host`` reads it all at once; nothing of it is kept after. A timed run (``--benchmark``,
``timing`` in the config) installs only the step timer: no dispatch mode, no forward hooks, no loss,
gradient or update reads, and the timer waits for the GPU before each reading. mplint's code in the
hooks runs under ``failures.own_code``: an exception there is reported as mplint's."""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from collections import Counter

from mplint.verify import loop_caps, loops, recorder, sandbox, torch_reads
from mplint.verify.failures import failed, guarded, own_code
from mplint.verify.patching import patch_function

_local = threading.local()
UNSCALED = "_mplint_unscaled"  # on the tensor GradScaler.scale returns: the loss the user wrote (detached)


def R() -> recorder.Recorder:
    return recorder.RECORDER


def _params(optimizer) -> list:
    return [p for group in optimizer.param_groups for p in group["params"]]


def _timing() -> bool:
    return bool(R().config.get("timing"))


def _pending() -> dict:
    """What the step now running has learnt, as tensors on its device (read when it is recorded)."""
    if not hasattr(_local, "pending"):
        _local.pending = {}
    return _local.pending


def _loss_tensor(loss):
    try:
        return loss.detach().float().mean()
    except Exception:  # noqa: BLE001 - a loss of an odd type is not recorded
        return None


def _clock() -> float:
    """Now, once the GPU has finished what the step queued (else the time is that of queueing it)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return time.perf_counter()


def _before_step(optimizer) -> None:
    """Before a step: the loop it belongs to becomes the current one; a step past that loop's cap
    ends the loop (raises LoopCapped, caught by the loop) and the script goes on after it. Where the
    script runs no loop around the step, or caught the stop, the run ends here."""
    rec = R()
    site = loops.current(rec.config["script"])
    loop = rec.enter_loop(site.key, lambda: loop_caps.loop_label(site, rec.loop_keys))
    unit = rec.unit_of(id(optimizer), type(optimizer).__name__)
    if site.step_line is not None:
        rec.step_lines.add(site.step_line)
    if rec.steps_of(unit) < rec.cap:
        return
    _local.loss, _local.pending = None, {}  # the backward of a step that is not taken
    loop_caps.end_loop(site, loop)


def stopped_after_cap(exc: BaseException, crash: dict) -> bool:
    """A script that fails after one of its loops was ended at its cap, outside any training loop
    (loading the checkpoint the whole loop would have saved): the run is taken as stopped at that cap,
    as it was before the script went on, with a note. True when so (the crash is then not recorded)."""
    rec = R()
    if not rec.capped_loops:
        return False
    where = loops.escaped(exc)
    if where is not None:
        name, line = where
        script = rec.config["script"]
        try:
            with open(script, encoding="utf-8") as fh:
                trains = name == os.path.basename(script) and line in loops.training_loops(fh.read())
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError, RecursionError):
            trains = False
        if trains or any(label.startswith(f"loop at {name}:{line}") for label in rec.loops):
            return False  # a training loop of its own failed: a crash to report
    place = f" at {crash['file']}:{crash['line']}" if crash.get("line") else ""
    rec.note(
        "loop_stops",
        f"after the {rec.last_capped} ended at its cap, the script stopped with {crash['error']}{place}: "
        "what follows a capped loop may need what the rest of the loop would have made (a checkpoint), so the "
        "run counts as stopped at the cap",
    )
    return True


@guarded
def _pre_step(optimizer, args, kwargs) -> None:
    """Before the update: whether the gradients are finite, and on an optimizer's first step its gradients
    (underflow) and weights (update size)."""
    if not getattr(_local, "scaler_depth", 0):  # else GradScaler.step did it
        _before_step(optimizer)
    if _timing():
        return
    import torch

    params = [p for p in _params(optimizer) if p.grad is not None]
    pending = _pending()
    if params:
        pending["finite"] = torch.stack([torch.isfinite(p.grad).all() for p in params]).all()
    if id(optimizer) not in R().grads_taken:
        pending["before"] = [p.detach().clone() for p in params]
        if R().config.get("capture_grads"):
            pending["grads"] = [p.grad.detach().clone() for p in params]


@guarded
def _post_step(optimizer, args, kwargs) -> None:
    pending = _pending()
    before = pending.pop("before", None)
    if before:
        import torch

        params = [p for p in _params(optimizer) if p.grad is not None]
        squares = [(p.detach().float() - b.float()).square().sum() for p, b in zip(params, before)]
        pending["update"] = torch.stack(squares).sum().sqrt()
    if not getattr(_local, "scaler_depth", 0):  # else recorded by GradScaler.step, which knows the scale
        _record(optimizer)


def _record(optimizer, scale=None, found_inf=()) -> None:
    """The step ends here: what it learnt read once (torch_reads.host) and recorded; no tensor of it is kept."""
    rec = R()
    if rec.device is None:
        rec.device = next((_device_name(p.device) for p in _params(optimizer)), None)
    if _timing():
        rec.record_step(id(optimizer), type(optimizer).__name__, None, None, True, None, at=_clock())
        return
    params = _params(optimizer)
    pending, _local.pending = _pending(), {}
    loss, _local.loss = getattr(_local, "loss", None), None
    found = {f"found_inf {i}": t for i, t in enumerate(found_inf)}
    read = torch_reads.host({"loss": loss, "scale": scale, **found, **pending})
    finite = not any(read[name] for name in found) if found else read.get("finite") in (None, 1.0)
    model = rec.model_of(params)
    grads, update = read.get("grads"), read.get("update")
    _local.loss = read["loss"]  # a number: the loss of a second optimizer stepped after the same backward
    rec.record_step(
        id(optimizer), type(optimizer).__name__, model, read["loss"], finite, read["scale"], grads, update, _clock()
    )


def _device_name(device) -> str:
    import torch

    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return str(device)


def wrap_scaler_step(original):
    def step(self, optimizer, *args, **kwargs):
        with own_code():
            _before_step(optimizer)
            _local.scaler_depth = getattr(_local, "scaler_depth", 0) + 1
        try:
            result = original(self, optimizer, *args, **kwargs)
        finally:
            _local.scaler_depth -= 1
        with own_code():
            if _timing() or not self.is_enabled():
                _record(optimizer)
            else:
                scale = getattr(self, "_scale", None)
                _record(
                    optimizer,
                    self.get_scale() if scale is None else scale,
                    self._found_inf_per_device(optimizer).values(),
                )
        return result

    return step


def wrap_scaler_scale(original):
    def scale(self, outputs):
        scaled = original(self, outputs)
        with own_code():
            if hasattr(outputs, "detach") and hasattr(scaled, "backward"):
                setattr(scaled, UNSCALED, outputs.detach())
        return scaled

    return scale


def wrap_backward(original):
    def backward(self, *args, **kwargs):
        with own_code():
            _local.loss = _loss_tensor(getattr(self, UNSCALED, self))
            if "keras" in sys.modules:  # Keras 3 on torch: the loss of its next apply()
                from mplint.verify import hooks

                hooks.remember_loss(None, hooks.unscaled(self))
        return original(self, *args, **kwargs)

    return backward


def _keras_layer(module) -> bool:
    """A Keras 3 layer or model on the torch backend (also a torch module): recorded by the Keras hooks."""
    layer = getattr(sys.modules.get("keras.src.layers.layer"), "Layer", None)
    return layer is not None and isinstance(module, layer)


@guarded
def _forward_pre(module, args) -> None:
    if _keras_layer(module):
        return
    _local.depth = getattr(_local, "depth", 0) + 1


@guarded
def _forward_post(module, args, output) -> None:
    if _keras_layer(module):
        return
    _local.depth = getattr(_local, "depth", 1) - 1
    if _local.depth or not any(True for _ in module.parameters()):  # nested layers and loss modules
        return
    import torch

    flat = output if isinstance(output, (list, tuple)) else output.values() if isinstance(output, dict) else [output]
    R().see_model(module, 0, {str(t.dtype).replace("torch.", "") for t in flat if isinstance(t, torch.Tensor)})


def _requested(original, self, args, kwargs) -> bool:
    """Whether the script asked for ``enabled`` (the default is True)."""
    import inspect

    try:
        return bool(inspect.signature(original).bind(self, *args, **kwargs).arguments.get("enabled", True))
    except TypeError:
        return True


def _turned_off(what: str, device: str) -> None:
    """torch disables autocast and the GradScaler for a device it does not have, with only a warning:
    the script's reduced-precision path then does not run at all here."""
    R().note("turned_off", f"{what} was turned off by torch: no {device} device here, so it did not run")


def wrap_autocast_init(original):
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        with own_code():
            _autocast_made(original, self, args, kwargs)

    return __init__


def _autocast_made(original, self, args, kwargs) -> None:
    if R().config.get("force_policy") != "float32" and not self._enabled and _requested(original, self, args, kwargs):
        _turned_off(f"autocast(device_type={self.device!r})", self.device)
    if R().config.get("force_policy") == "float32":
        R().policy_set = "float32"
        if self._enabled:
            R().note("notes", "autocast turned off for the float32 reference")
        self._enabled = False
    elif self._enabled:
        R().policy_set = f"autocast {str(self.fast_dtype).replace('torch.', '')}"


_op_modes: dict = {}  # the dispatch mode class, made once torch is imported
SKIPPED_OPS = ("detach", "lift_fresh", "_unsafe_view")  # bookkeeping, not computation


def _op_mode_class():
    """A ``TorchDispatchMode`` counting (aten op, output dtype) for the ops below autocast: it sees
    each op after autocast has cast its inputs, and autocast's casts themselves (``_to_copy``)."""
    if "cls" not in _op_modes:
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_leaves

        class AutocastOps(TorchDispatchMode):
            def __init__(self):
                super().__init__()
                self.counts: Counter = Counter()

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))  # the script's op: its errors are the script's
                try:
                    self.count(func, args, kwargs, out)
                except Exception as exc:  # noqa: BLE001 - mplint's bookkeeping
                    failed(exc)
                return out

            def count(self, func, args, kwargs, out) -> None:
                name = func.overloadpacket.__name__
                first = out[0] if isinstance(out, (tuple, list)) and out else out
                dtype = getattr(first, "dtype", None)
                computed = (
                    not func.is_view and name not in SKIPPED_OPS and dtype is not None and dtype.is_floating_point
                )
                # factories (randn, zeros) take no tensor: autocast does not apply to them
                if computed and any(isinstance(a, torch.Tensor) for a in tree_leaves((args, kwargs))):
                    self.counts[(name, str(dtype).replace("torch.", ""))] += 1

        _op_modes["cls"] = AutocastOps
    return _op_modes["cls"]


def wrap_autocast_enter(original):
    def __enter__(self):
        result = original(self)
        with own_code():
            if self._enabled and R().config.get("force_policy") != "float32":
                mode = _op_mode_class()()
                mode.__enter__()
                self.__dict__.setdefault("_mplint_op_modes", []).append(mode)
        return result

    return __enter__


def wrap_autocast_exit(original):
    def __exit__(self, *exc):
        with own_code():
            modes = self.__dict__.get("_mplint_op_modes")
            if modes:
                mode = modes.pop()
                mode.__exit__(None, None, None)
                R().autocast_region(mode.counts)
        return original(self, *exc)

    return __exit__


def wrap_scaler_init(original):
    def __init__(self, *args, **kwargs):
        if R().config.get("force_policy") == "float32":
            kwargs["enabled"] = False
        original(self, *args, **kwargs)
        with own_code():
            if not self._enabled and _requested(original, self, args, kwargs):
                device = getattr(self, "_device", "cuda")
                _turned_off(f"GradScaler({device!r})", device)

    return __init__


def blocked_download(what: str):
    def make(original):
        @functools.wraps(original)
        def blocked(*args, **kwargs):
            target = kwargs.get("url") or kwargs.get("repo_or_dir") or (args[0] if args else "?")
            R().note("downloads_blocked", f"{what}({target})")
            raise sandbox.DownloadBlocked(
                f"mplint verify: {what} of {target} blocked: the run is offline; give the script local or "
                "synthetic data (e.g. torch.randn tensors in a TensorDataset)"
            )

        return blocked

    return make


def install_torch(torch) -> None:
    """The hooks; for a timed run only those that count steps, end loops, time steps, turn reduced precision off
    for the float32 reference and block downloads."""
    from torch.optim import optimizer

    torch.manual_seed(R().config["seed"])
    optimizer.register_optimizer_step_pre_hook(_pre_step)
    optimizer.register_optimizer_step_post_hook(_post_step)
    scaler_cls = torch.amp.GradScaler
    scaler_cls.step = wrap_scaler_step(scaler_cls.step)
    scaler_cls.__init__ = wrap_scaler_init(scaler_cls.__init__)
    torch.autocast.__init__ = wrap_autocast_init(torch.autocast.__init__)
    if not _timing():
        torch.nn.modules.module.register_module_forward_pre_hook(_forward_pre)
        torch.nn.modules.module.register_module_forward_hook(_forward_post)
        torch.Tensor.backward = wrap_backward(torch.Tensor.backward)
        scaler_cls.scale = wrap_scaler_scale(scaler_cls.scale)
        torch.autocast.__enter__ = wrap_autocast_enter(torch.autocast.__enter__)
        torch.autocast.__exit__ = wrap_autocast_exit(torch.autocast.__exit__)
    for name in ("load", "load_state_dict_from_url", "download_url_to_file"):
        patch_function("torch.hub", name, blocked_download(f"torch.hub.{name}"), "torch")


def install_torchvision(torchvision) -> None:
    for name in ("download_url", "download_and_extract_archive", "download_file_from_google_drive"):
        patch_function(
            "torchvision.datasets.utils", name, blocked_download(f"torchvision dataset download {name}"), "torchvision"
        )
