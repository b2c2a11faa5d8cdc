"""Patches applied to TensorFlow and Keras as the script imports them (nothing is imported early).

Every optimizer application is recorded: eagerly, through ``tf.py_function`` inside ``tf.function`` and graph
loops, or through ``jax.debug.callback`` inside ``jax.jit`` (Keras 3 on JAX; on torch every step is eager);
training is capped; datasets, saving and downloads are redirected."""

from __future__ import annotations

import inspect
import sys
import threading

import numpy as np

from mplint.verify import datasets, keras_tensors, recorder, sandbox

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
    """Before a training step the script takes outside fit(): an eager ``apply_gradients``/``apply``/
    ``stateless_apply``, or a call of a ``tf.function`` or ``jax.jit`` function (whose optimizer steps run inside,
    out of Python's reach). The script's loop around it becomes the current loop, and once every optimizer of that
    loop has made its capped steps the loop is ended there (LoopCapped) and the script goes on to its next loop, as
    a PyTorch loop is."""
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
        pairs = list(grads_and_vars)
        if not keras_tensors.traced([g for g, _ in pairs]):
            before_step()
        result, outer = _outermost(lambda: original(self, pairs, *args, **kwargs))
        if outer:
            after_apply(self, [g for g, _ in pairs], [v for _, v in pairs])
        return result

    return apply_gradients


def wrap_apply(original):
    def apply(self, grads, trainable_variables=None, *args, **kwargs):
        grads = list(grads)
        if not keras_tensors.traced(grads):
            before_step()
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


def wrap_stateless_apply(original):
    """Keras 3's step of a JAX loop (its own ``fit()`` too): the scale is the optimizer variable it returns."""

    def stateless_apply(self, optimizer_variables, grads, trainable_variables, *args, **kwargs):
        grads = list(grads)
        if not keras_tensors.traced(grads):
            before_step()
        result, outer = _outermost(
            lambda: original(self, optimizer_variables, grads, trainable_variables, *args, **kwargs)
        )
        if outer:
            after_apply(self, grads, list(trainable_variables), scale=_stateless_scale(self, result[1]))
        return result

    return stateless_apply


def _stateless_scale(opt, optimizer_variables):
    """The dynamic scale among the optimizer variables a stateless step returned (None without one)."""
    scale = getattr(opt, "dynamic_scale", None)
    if scale is None or not hasattr(opt, "inner_optimizer"):
        return None
    return next((value for v, value in zip(opt.variables, optimizer_variables) if v is scale), None)


def wrap_scale_loss(original):
    def scale_loss(self, loss, *args, **kwargs):
        scaled = original(self, loss, *args, **kwargs)
        if len(_scaled_losses) > 64:
            _scaled_losses.clear()
        _scaled_losses[id(scaled)] = (scaled, loss)
        if getattr(_local, "differentiating", 0):  # jax.value_and_grad returns the scaled value: divide it back
            _local.scale_factor = original(self, 1.0)
        return scaled

    return scale_loss


def differentiate(call, sources, has_aux: bool):
    """``call()`` of a function ``jax.value_and_grad`` made, returning its ``(value, grads)``; the loss (the value,
    less the scale ``scale_loss`` multiplied it by) is remembered as that of ``sources``, as ``tape.gradient``
    remembers its target."""
    _local.differentiating = getattr(_local, "differentiating", 0) + 1
    _local.scale_factor = None
    try:
        value, grads = call()
        loss, factor = value[0] if has_aux else value, _local.scale_factor
    finally:
        _local.differentiating -= 1
        _local.scale_factor = None
    remember_loss(sources, loss if factor is None else loss / factor)
    return value, grads


def remember_loss(sources, loss) -> None:
    """``loss`` was differentiated with respect to ``sources`` (None: whatever the next step applies, as
    ``loss.backward()`` on torch fills every parameter's gradient)."""
    targets = getattr(_local, "targets", [])[-15:]  # the losses differentiated lately, by their variables
    _local.targets = [*targets, (None if sources is None else {id(v) for v in _leaves(sources)}, loss)]


def unscaled(loss):
    """The loss the user wrote, behind the one ``scale_loss`` returned."""
    return _scaled_losses.get(id(loss), (None, loss))[1]


def _leaves(x) -> list:
    if isinstance(x, (list, tuple)):
        return [leaf for v in x for leaf in _leaves(v)]
    if isinstance(x, dict):
        return [leaf for v in x.values() for leaf in _leaves(v)]
    return [x]


def wrap_gradient(original):
    def gradient(self, target, sources, *args, **kwargs):
        remember_loss(sources, unscaled(target))
        return original(self, target, sources, *args, **kwargs)

    return gradient


def _loss_for(variables) -> object:
    """The loss whose gradient the optimizer applies: the latest ``tape.gradient`` target taken
    with respect to these variables (one tape per model in a GAN, or one persistent tape)."""
    ids = {id(v) for v in variables}
    for sources, loss in reversed(getattr(_local, "targets", [])):
        if sources is None or sources & ids:
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


def after_apply(opt, grads, variables, scale=None) -> None:
    """Record one optimizer application: its loss, whether its gradients are finite, the loss scale after it
    (``scale``, else the optimizer's) and, for the first, its gradients."""
    tf = sys.modules.get("tensorflow")
    if tf is not None:
        grads = [_dense(tf, g) for g in grads]
    pairs = [(g, v) for g, v in zip(grads, variables or [None] * len(grads)) if g is not None]
    grads = [g for g, _ in pairs]
    variables = [v for _, v in pairs if v is not None]
    loss = _loss_for(variables)
    # a JAX step's variables are arrays: the model is the one whose variables the optimizer was built for
    model = R().model_of(variables) or R().model_of(list(getattr(opt, "_trainable_variables", None) or []))
    scale = _loss_scale(opt) if scale is None else scale
    opt_id, label = id(opt), _optimizer_label(opt)
    capture = bool(R().config.get("capture_grads")) and opt_id not in R().grads_taken
    if tf is not None and tf.inside_function():
        _record_in_graph(tf, opt_id, label, model, grads, loss, scale, capture)
    elif keras_tensors.traced([grads, loss, scale]):
        _record_in_jit(opt_id, label, model, grads, loss, scale, capture)
    else:
        finite = all(bool(np.all(np.isfinite(keras_tensors.to_numpy(g)))) for g in grads)
        try:
            value = float(np.mean(keras_tensors.to_numpy(loss))) if loss is not None else None
        except (TypeError, ValueError, NotImplementedError, AttributeError):  # a symbolic loss from another graph
            value = None
        scale_value = float(keras_tensors.to_numpy(scale)) if scale is not None else None
        captured = [keras_tensors.to_numpy(g) for g in grads] if capture else None
        R().record_step(opt_id, label, model, value, finite, scale_value, captured)


def _record_in_graph(tf, opt_id, label, model, grads, loss, scale, capture) -> None:
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


def _record_in_jit(opt_id, label, model, grads, loss, scale, capture) -> None:
    """Inside ``jax.jit``: the step's values reach the recorder through ``jax.debug.callback`` when it runs."""
    import jax
    import jax.numpy as jnp

    finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(jnp.asarray(g, jnp.float32))) for g in grads])) if grads else True
    values = [
        finite,
        jnp.asarray(scale, jnp.float32) if scale is not None else -1.0,
        jnp.mean(jnp.asarray(loss, jnp.float32)) if loss is not None else 0.0,
        *([jnp.asarray(g, jnp.float32) for g in grads] if capture else []),
    ]

    def record(finite_value, scale_value, loss_value, *captured):
        R().record_step(
            opt_id,
            label,
            model,
            float(np.asarray(loss_value)) if loss is not None else None,
            bool(np.asarray(finite_value)),
            float(np.asarray(scale_value)) if scale is not None else None,
            [np.asarray(c) for c in captured] if captured else None,
        )

    jax.debug.callback(record, *values)


# --- models ------------------------------------------------------------------------------


def wrap_call(generation: int):
    def make(original):
        def __call__(self, *args, **kwargs):
            outputs, outer = _outermost(lambda: original(self, *args, **kwargs))
            if outer:
                _see_outputs(self, generation, outputs)
            return outputs

        return __call__

    return make


def _see_outputs(model, generation: int, outputs) -> None:
    flat = _leaves(outputs)
    # symbolic calls are not runs: Keras tensors, and torch's "meta" tensors of Keras's shape inference on torch
    if not any(type(t).__name__ == "KerasTensor" or str(getattr(t, "device", "")) == "meta" for t in flat):
        R().see_model(model, generation, {getattr(t.dtype, "name", str(t.dtype)) for t in flat if hasattr(t, "dtype")})


def wrap_stateless_call(original):
    """``model.stateless_call`` (Keras 3 on JAX: ``fit()`` and stateless loops call the model this way, not through
    ``__call__``): its outputs are the first of what it returns."""

    def stateless_call(self, *args, **kwargs):
        result, outer = _outermost(lambda: original(self, *args, **kwargs))
        if outer:
            _see_outputs(self, 3, result[0])
        return result

    return stateless_call


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
        if "jit_compile" in params and keras_tensors.backend(self) != "jax":
            # recording uses tf.py_function, which XLA cannot hold, and Python hooks, which torch.compile breaks
            # at; a JAX step records through jax.debug.callback, inside jit
            arguments["jit_compile"] = False
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
