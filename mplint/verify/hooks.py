"""Patches applied to TensorFlow and Keras as the script imports them (nothing is imported early).

Every optimizer application is recorded (eagerly, or through ``tf.py_function`` inside
``tf.function`` and graph loops); training is capped; datasets, saving and downloads are
redirected."""

from __future__ import annotations

import inspect
import sys
import threading

import numpy as np

from mplint.verify import datasets, recorder, sandbox

_local = threading.local()
_scaled_losses: dict = {}  # id(scaled loss) -> (scaled, loss): report the loss the user wrote


def R() -> recorder.Recorder:
    return recorder.RECORDER


# --- optimizer applications -------------------------------------------------------------


def _outermost(method):
    """Call through; True when this is the call the user made (not one nested inside another)."""
    depth = getattr(_local, "depth", 0)
    _local.depth = depth + 1
    try:
        return method(), depth == 0
    finally:
        _local.depth = depth


def before_step() -> None:
    """Before a training step the script takes outside fit(): an eager ``apply_gradients``/``apply``, or a call of
    a ``tf.function`` (whose optimizer steps run inside, out of Python's reach). The script's loop around it becomes
    the current loop, and once every optimizer of that loop has made its capped steps the loop is ended there
    (LoopCapped) and the script goes on to its next loop, as a PyTorch loop is."""
    rec = R()
    tf = sys.modules.get("tensorflow")
    if rec.in_fit or rec.finished or getattr(_local, "depth", 0) or tf is not None and tf.inside_function():
        return
    from mplint.verify import loop_caps, loops

    site = loops.current(rec.config["script"])
    if site.frame is None:
        return  # no loop of the script around it: the step cap of record_step applies
    loop = rec.enter_loop(site.key, lambda: loop_caps.loop_label(site, rec.loop_keys))
    units = [unit for unit, known in rec.units.items() if known["loop"] == loop]
    if units and all(rec.steps_of(unit) >= rec.cap for unit in units):
        loop_caps.end_loop(site, loop)


def wrap_traced_call(original):
    def __call__(self, *args, **kwargs):
        before_step()
        return original(self, *args, **kwargs)

    return __call__


def wrap_apply_gradients(original):
    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        before_step()
        pairs = list(grads_and_vars)
        result, outer = _outermost(lambda: original(self, pairs, *args, **kwargs))
        if outer:
            after_apply(self, [g for g, _ in pairs], [v for _, v in pairs])
        return result

    return apply_gradients


def wrap_apply(original):
    def apply(self, grads, trainable_variables=None, *args, **kwargs):
        before_step()
        grads = list(grads)
        result, outer = _outermost(lambda: original(self, grads, trainable_variables, *args, **kwargs))
        if outer:
            variables = (
                list(trainable_variables)
                if trainable_variables is not None
                else list(getattr(self, "_trainable_variables", None) or [])
            )
            after_apply(self, grads, variables)
        return result

    return apply


def wrap_scale_loss(original):
    def scale_loss(self, loss, *args, **kwargs):
        scaled = original(self, loss, *args, **kwargs)
        if len(_scaled_losses) > 64:
            _scaled_losses.clear()
        _scaled_losses[id(scaled)] = (scaled, loss)
        return scaled

    return scale_loss


def _leaves(x) -> list:
    if isinstance(x, (list, tuple)):
        return [leaf for v in x for leaf in _leaves(v)]
    if isinstance(x, dict):
        return [leaf for v in x.values() for leaf in _leaves(v)]
    return [x]


def wrap_gradient(original):
    def gradient(self, target, sources, *args, **kwargs):
        loss = _scaled_losses.get(id(target), (None, target))[1]
        targets = getattr(_local, "targets", [])[-15:]  # the losses differentiated lately, by their variables
        _local.targets = [*targets, ({id(v) for v in _leaves(sources)}, loss)]
        return original(self, target, sources, *args, **kwargs)

    return gradient


def _loss_for(variables) -> object:
    """The loss whose gradient the optimizer applies: the latest ``tape.gradient`` target taken
    with respect to these variables (one tape per model in a GAN, or one persistent tape)."""
    ids = {id(v) for v in variables}
    for sources, loss in reversed(getattr(_local, "targets", [])):
        if sources & ids:
            return loss
    return None


def _loss_scale(opt):
    if hasattr(opt, "dynamic_scale") and hasattr(opt, "inner_optimizer"):
        return opt.dynamic_scale
    if hasattr(opt, "get_scaled_loss") and hasattr(opt, "loss_scale"):
        return opt.loss_scale
    return None


def _optimizer_label(opt) -> str:
    inner = getattr(opt, "inner_optimizer", None)
    return f"{type(opt).__name__}({type(inner).__name__})" if inner is not None else type(opt).__name__


def _dense(tf, g):
    return g.values if isinstance(g, tf.IndexedSlices) else g


def after_apply(opt, grads, variables) -> None:
    tf = sys.modules["tensorflow"]
    pairs = [(_dense(tf, g), v) for g, v in zip(grads, variables or [None] * len(grads)) if g is not None]
    grads = [g for g, _ in pairs]
    loss = _loss_for([v for _, v in pairs if v is not None])
    model = R().model_of([v for _, v in pairs if v is not None])
    scale = _loss_scale(opt)
    opt_id, label = id(opt), _optimizer_label(opt)
    capture = R().config.get("capture_grads") and opt_id not in R().grads_taken
    if not tf.inside_function():
        finite = all(bool(np.all(np.isfinite(np.asarray(g)))) for g in grads)
        try:
            value = float(np.mean(np.asarray(loss))) if loss is not None else None
        except (TypeError, ValueError, NotImplementedError):  # a symbolic loss from another graph
            value = None
        scale_value = float(np.asarray(scale)) if scale is not None else None
        captured = [np.asarray(tf.cast(g, tf.float32)) for g in grads] if capture else None
        R().record_step(opt_id, label, model, value, finite, scale_value, captured)
        return
    graph = tf.compat.v1.get_default_graph()
    has_loss = loss is not None and getattr(loss, "graph", None) is graph
    finite = (
        tf.reduce_all(tf.stack([tf.reduce_all(tf.math.is_finite(tf.cast(g, tf.float32))) for g in grads]))
        if grads
        else tf.constant(True)
    )
    inputs = [
        finite,
        tf.cast(tf.convert_to_tensor(scale), tf.float32) if scale is not None else tf.constant(-1.0),
        tf.cast(tf.reduce_mean(loss), tf.float32) if has_loss else tf.constant(0.0),
        *([tf.cast(g, tf.float32) for g in grads] if capture else []),
    ]

    def record(finite_value, scale_value, loss_value, *captured):
        R().record_step(
            opt_id,
            label,
            model,
            float(loss_value.numpy()) if has_loss else None,
            bool(finite_value.numpy()),
            float(scale_value.numpy()) if scale is not None else None,
            [c.numpy() for c in captured] if captured else None,
        )
        return []

    tf.py_function(record, inputs, Tout=[])


# --- models ------------------------------------------------------------------------------


def wrap_call(generation: int):
    def make(original):
        def __call__(self, *args, **kwargs):
            outputs, outer = _outermost(lambda: original(self, *args, **kwargs))
            if outer:
                tf = sys.modules["tensorflow"]
                flat = tf.nest.flatten(outputs)
                if not any(type(t).__name__ == "KerasTensor" for t in flat):
                    R().see_model(
                        self, generation, {getattr(t.dtype, "name", str(t.dtype)) for t in flat if hasattr(t, "dtype")}
                    )
            return outputs

        return __call__

    return make


def _is_arrays(x) -> bool:
    if isinstance(x, (list, tuple)):
        return bool(x) and all(_is_arrays(v) for v in x)
    if isinstance(x, dict):
        return bool(x) and all(_is_arrays(v) for v in x.values())
    return isinstance(x, np.ndarray) or (
        hasattr(x, "shape") and hasattr(x, "dtype") and type(x).__name__ != "KerasTensor"
    )


def _take(x, n):
    if isinstance(x, (list, tuple)):
        return type(x)(_take(v, n) for v in x)
    if isinstance(x, dict):
        return {k: _take(v, n) for k, v in x.items()}
    return x[:n] if x is not None else None


def _bind(original, self, args, kwargs):
    bound = inspect.signature(original).bind(self, *args, **kwargs)
    return bound, bound.arguments


def _cap_data(arguments, steps, steps_key):
    x = arguments.get("x")
    if _is_arrays(x):
        n = steps * (arguments.get("batch_size") or 32)
        for key in ("x", "y", "sample_weight"):
            if arguments.get(key) is not None:
                arguments[key] = _take(arguments[key], n)
        arguments.pop(steps_key, None)
    else:
        arguments[steps_key] = min(steps, arguments.get(steps_key) or steps)


def wrap_fit(original):
    def fit(self, *args, **kwargs):
        rec = R()
        bound, arguments = _bind(original, self, args, kwargs)
        arguments["epochs"] = 1
        arguments.pop("initial_epoch", None)
        for key in ("validation_data", "validation_split", "validation_steps", "validation_freq"):
            arguments.pop(key, None)
        callbacks = arguments.get("callbacks")
        if callbacks:
            kept = [c for c in callbacks if type(c).__name__ != "TensorBoard"]
            if len(kept) != len(callbacks):
                rec.note("notes", "TensorBoard callback removed")
            arguments["callbacks"] = kept
        _cap_data(arguments, rec.cap, "steps_per_epoch")
        if not rec.in_fit:
            rec.start_loop("fit()")
        rec.in_fit += 1
        try:
            return original(*bound.args, **bound.kwargs)
        finally:
            rec.in_fit -= 1
            if not rec.in_fit:
                rec.loop = None  # steps after this fit() are a new loop with its own cap

    return fit


def wrap_capped(steps_key: str):
    def make(original):
        def capped(self, *args, **kwargs):
            bound, arguments = _bind(original, self, args, kwargs)
            _cap_data(arguments, R().cap, steps_key)
            return original(*bound.args, **bound.kwargs)

        return capped

    return make


def wrap_compile(original):
    def compile(self, *args, **kwargs):
        bound, arguments = _bind(original, self, args, kwargs)
        params = inspect.signature(original).parameters
        if "jit_compile" in params:
            arguments["jit_compile"] = False  # recording uses tf.py_function, which XLA cannot hold
        if "steps_per_execution" in params:
            arguments["steps_per_execution"] = 1
        return original(*bound.args, **bound.kwargs)

    return compile


def wrap_path_arg(index: int, writing: bool = True):
    def make(original):
        def redirected(*args, **kwargs):
            args = list(args)
            if len(args) > index:
                args[index] = sandbox.redirect(args[index], writing=writing)
            for key in ("filepath", "export_dir", "file_prefix", "logdir"):
                if key in kwargs:
                    kwargs[key] = sandbox.redirect(kwargs[key], writing=writing)
            return original(*args, **kwargs)

        return redirected

    return make


def wrap_policy_setter(original):
    def set_policy(policy):
        name = getattr(policy, "name", policy)
        if name != "float32":
            R().note("notes", f"script sets policy {name}")
        forced = R().config.get("force_policy")
        if forced and forced != name:
            R().note("notes", f"policy forced to {forced}")
            policy = forced
        R().policy_set = getattr(policy, "name", policy)  # Keras 3 keeps the policy per thread
        return original(policy)

    return set_policy


def fake_load_data(name):
    def make(original):
        def load_data(*args, **kwargs):
            R().note("datasets_replaced", name)
            return datasets.load(name, R().config["seed"], **kwargs)

        return load_data

    return make


def blocked_get_file(original):
    def get_file(fname=None, origin=None, *args, **kwargs):
        url = origin or kwargs.get("url") or fname
        R().note("downloads_blocked", f"get_file({url})")
        raise sandbox.DownloadBlocked(f"mplint verify: download of {url} blocked")

    return get_file


def wrap_function(original):
    def function(*args, **kwargs):
        if kwargs.get("jit_compile"):
            R().note("notes", "tf.function(jit_compile=True) run without XLA")
            kwargs["jit_compile"] = False
        return original(*args, **kwargs)

    return function
