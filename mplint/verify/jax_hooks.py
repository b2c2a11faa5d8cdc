"""Patches applied to JAX as a Keras 3 script on the jax backend imports it (Keras's own steps are recorded by the
optimizer and model hooks of ``hooks.py``, through ``jax.debug.callback`` inside ``jax.jit``).

- A call of a ``jax.jit`` function from Python is a step the loop caps count, as a ``tf.function``'s call is: its
  optimizer steps run compiled, out of Python's reach. The call waits for its result, so that the step's recording
  is in before the next step is counted (JAX dispatches asynchronously). Only the public ``jax.jit`` is wrapped, so
  JAX's own uses of ``jit`` are untouched.
- ``jax.value_and_grad`` remembers the loss it differentiated and for which variables, as ``GradientTape.gradient``
  does: the loss a step reports is the one the user wrote, divided back where ``scale_loss`` scaled it.
"""

from __future__ import annotations

import functools
import sys

from mplint.verify import hooks, keras_tensors


class Jitted:
    """A ``jax.jit`` function whose calls from Python (not from inside another trace) are steps."""

    def __init__(self, compiled):
        self._compiled = compiled
        functools.update_wrapper(self, compiled)

    def __call__(self, *args, **kwargs):
        if keras_tensors.traced((args, kwargs)):
            return self._compiled(*args, **kwargs)
        hooks.before_step()
        jax = sys.modules["jax"]
        # the step's recording (jax.debug.callback) is in before the next step asks how many steps were taken
        return jax.block_until_ready(self._compiled(*args, **kwargs))

    def __get__(self, instance, owner=None):  # a jitted method
        return self if instance is None else functools.partial(self, instance)

    def __getattr__(self, name):  # lower, trace, eval_shape, clear_cache...
        return getattr(self._compiled, name)


def wrap_jit(original):
    @functools.wraps(original)
    def jit(fun=None, *args, **kwargs):
        if fun is None:  # used as @jax.jit(static_argnames=...)
            return lambda f: jit(f, *args, **kwargs)
        return Jitted(original(fun, *args, **kwargs))

    return jit


def wrap_value_and_grad(original):
    @functools.wraps(original)
    def value_and_grad(fun, argnums=0, has_aux=False, *args, **kwargs):
        differentiated = original(fun, argnums, has_aux, *args, **kwargs)

        @functools.wraps(differentiated)
        def call(*call_args, **call_kwargs):
            positions = argnums if isinstance(argnums, (tuple, list)) else (argnums,)
            sources = [call_args[i] for i in positions if isinstance(i, int) and i < len(call_args)]
            return hooks.differentiate(lambda: differentiated(*call_args, **call_kwargs), sources, has_aux)

        return call

    return value_and_grad


def install_jax(jax) -> None:
    jax.jit = wrap_jit(jax.jit)
    jax.value_and_grad = wrap_value_and_grad(jax.value_and_grad)
