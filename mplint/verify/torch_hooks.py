"""Patches applied to PyTorch as the script imports it: optimizer steps counted by the global
step hooks, ``GradScaler`` steps with their scale and skipped (inf/NaN) steps, the loss of each
``backward()``, top-level modules' output dtypes by forward hooks, the dtype each op ran in inside
an autocast region (a ``TorchDispatchMode`` entered with the region), autocast/GradScaler turned
off for the float32 reference, and dataset/hub downloads blocked."""

from __future__ import annotations

import functools
import math
import os
import sys
import threading
from collections import Counter

from mplint.verify import hooks, loop_caps, loops, recorder, sandbox
from mplint.verify.hooks import patch_function

_local = threading.local()
_scaled: dict = {}  # id(scaled loss) -> loss: report the loss the user wrote


def R() -> recorder.Recorder:
    return recorder.RECORDER


def _params(optimizer) -> list:
    return [p for group in optimizer.param_groups for p in group["params"]]


def _finite(torch, tensors) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in tensors)


def _loss_value(loss) -> float | None:
    try:
        return float(loss.detach().float().mean())
    except Exception:  # noqa: BLE001 - a loss of an odd type is not recorded
        return None


def _before_step(optimizer) -> None:
    """Before a step: the loop it belongs to becomes the current one; a step past that loop's cap
    ends the loop (raises LoopCapped, caught by the loop) and the script goes on after it. Where the
    script runs no loop around the step, or caught the stop, the run ends here."""
    rec = R()
    site = loops.current(rec.config["script"])
    loop = rec.enter_loop(site.key, loop_caps.loop_label(site, rec.loop_keys))
    unit = rec.unit_of(id(optimizer), type(optimizer).__name__)
    if site.step_line is not None:
        rec.step_lines.add(site.step_line)
    if rec.steps_of(unit) < rec.cap:
        return
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


def _pre_step(optimizer, args, kwargs) -> None:
    """Before the update: the first step's gradients (underflow) and weights (update size)."""
    import torch

    if not getattr(_local, "scaler_depth", 0):  # else GradScaler.step did it
        _before_step(optimizer)
    params = [p for p in _params(optimizer) if p.grad is not None]
    _local.grads_finite = _finite(torch, [p.grad for p in params])
    first = id(optimizer) not in R().grads_taken
    _local.before = [p.detach().float().clone() for p in params] if first else None
    _local.grads = (
        [p.grad.detach().float().numpy().copy() for p in params] if first and R().config.get("capture_grads") else None
    )


def _post_step(optimizer, args, kwargs) -> None:

    before = getattr(_local, "before", None)
    update = None
    if before is not None:
        params = [p for p in _params(optimizer) if p.grad is not None]
        update = math.sqrt(sum(float(((p.detach().float() - b) ** 2).sum()) for p, b in zip(params, before)))
    _local.before = None
    if getattr(_local, "scaler_depth", 0):  # recorded by GradScaler.step, which knows the scale
        _local.update = update
        return
    _record(optimizer, getattr(_local, "grads_finite", True), None, update)


def _record(optimizer, finite: bool, scale, update) -> None:
    rec = R()
    model = rec.model_of(_params(optimizer))
    loss = getattr(_local, "loss", None)
    grads, _local.grads = getattr(_local, "grads", None), None
    rec.record_step(id(optimizer), type(optimizer).__name__, model, loss, finite, scale, grads, update=update)


def wrap_scaler_step(original):
    def step(self, optimizer, *args, **kwargs):
        _before_step(optimizer)
        _local.scaler_depth = getattr(_local, "scaler_depth", 0) + 1
        _local.update = None
        _local.grads_finite = True
        try:
            result = original(self, optimizer, *args, **kwargs)
        finally:
            _local.scaler_depth -= 1
        if not self.is_enabled():
            _record(optimizer, _local.grads_finite, None, _local.update)
            return result
        found_inf = sum(float(v) for v in self._found_inf_per_device(optimizer).values())
        _record(optimizer, found_inf == 0, float(self.get_scale()), _local.update)
        return result

    return step


def wrap_scaler_scale(original):
    def scale(self, outputs):
        scaled = original(self, outputs)
        if len(_scaled) > 64:
            _scaled.clear()
        _scaled[id(scaled)] = outputs
        return scaled

    return scale


def wrap_backward(original):
    def backward(self, *args, **kwargs):
        _local.loss = _loss_value(_scaled.get(id(self), self))
        hooks.remember_loss(None, hooks.unscaled(self))  # Keras 3 on torch: the loss of its next apply()
        return original(self, *args, **kwargs)

    return backward


def _keras_layer(module) -> bool:
    """A Keras 3 layer or model on the torch backend (also a torch module): recorded by the Keras hooks."""
    layer = getattr(sys.modules.get("keras.src.layers.layer"), "Layer", None)
    return layer is not None and isinstance(module, layer)


def _forward_pre(module, args) -> None:
    if _keras_layer(module):
        return
    _local.depth = getattr(_local, "depth", 0) + 1


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
        if (
            R().config.get("force_policy") != "float32"
            and not self._enabled
            and _requested(original, self, args, kwargs)
        ):
            _turned_off(f"autocast(device_type={self.device!r})", self.device)
        if R().config.get("force_policy") == "float32":
            R().policy_set = "float32"
            if self._enabled:
                R().note("notes", "autocast turned off for the float32 reference")
            self._enabled = False
        elif self._enabled:
            R().policy_set = f"autocast {str(self.fast_dtype).replace('torch.', '')}"

    return __init__


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
                out = func(*args, **(kwargs or {}))
                name = func.overloadpacket.__name__
                first = out[0] if isinstance(out, (tuple, list)) and out else out
                dtype = getattr(first, "dtype", None)
                computed = (
                    not func.is_view and name not in SKIPPED_OPS and dtype is not None and dtype.is_floating_point
                )
                # factories (randn, zeros) take no tensor: autocast does not apply to them
                if computed and any(isinstance(a, torch.Tensor) for a in tree_leaves((args, kwargs))):
                    self.counts[(name, str(dtype).replace("torch.", ""))] += 1
                return out

        _op_modes["cls"] = AutocastOps
    return _op_modes["cls"]


def wrap_autocast_enter(original):
    def __enter__(self):
        result = original(self)
        if self._enabled and R().config.get("force_policy") != "float32":
            mode = _op_mode_class()()
            mode.__enter__()
            self.__dict__.setdefault("_mplint_op_modes", []).append(mode)
        return result

    return __enter__


def wrap_autocast_exit(original):
    def __exit__(self, *exc):
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
    from torch.optim import optimizer

    torch.manual_seed(R().config["seed"])
    optimizer.register_optimizer_step_pre_hook(_pre_step)
    optimizer.register_optimizer_step_post_hook(_post_step)
    torch.nn.modules.module.register_module_forward_pre_hook(_forward_pre)
    torch.nn.modules.module.register_module_forward_hook(_forward_post)
    torch.Tensor.backward = wrap_backward(torch.Tensor.backward)
    scaler_cls = torch.amp.GradScaler
    scaler_cls.step = wrap_scaler_step(scaler_cls.step)
    scaler_cls.scale = wrap_scaler_scale(scaler_cls.scale)
    scaler_cls.__init__ = wrap_scaler_init(scaler_cls.__init__)
    torch.autocast.__init__ = wrap_autocast_init(torch.autocast.__init__)
    torch.autocast.__enter__ = wrap_autocast_enter(torch.autocast.__enter__)
    torch.autocast.__exit__ = wrap_autocast_exit(torch.autocast.__exit__)
    for name in ("load", "load_state_dict_from_url", "download_url_to_file"):
        patch_function("torch.hub", name, blocked_download(f"torch.hub.{name}"), "torch")


def install_torchvision(torchvision) -> None:
    for name in ("download_url", "download_and_extract_archive", "download_file_from_google_drive"):
        patch_function(
            "torchvision.datasets.utils", name, blocked_download(f"torchvision dataset download {name}"), "torchvision"
        )
