"""What the instrumented process remembers, and how it writes it out for the parent."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import NoReturn

_real_open = open


MAX_LOOPS = 4  # training loops run per script: a fit() called once per epoch stops after this many


@dataclass
class Step:
    loss: float | None
    finite_grads: bool
    scale: float | None
    time: float
    model: str | None  # the model whose variables the optimizer updated
    unit: str  # "<loop label> / <optimizer label>"


@dataclass
class ModelSeen:
    name: str
    cls: str
    keras: int
    model: object = field(repr=False)
    output_dtypes: set = field(default_factory=set)


@dataclass
class Recorder:
    config: dict
    steps: list = field(default_factory=list)
    models: dict = field(default_factory=dict)  # id(model) -> ModelSeen
    current_model: str | None = None
    events: dict = field(
        default_factory=lambda: {
            "downloads_blocked": [],
            "writes_redirected": [],
            "datasets_replaced": [],
            "notes": [],
            "turned_off": [],
            "loop_stops": [],
        }
    )
    in_fit: int = 0
    lock: threading.Lock = field(default_factory=threading.RLock)
    finished: bool = False
    loop: str | None = None  # the training loop now running; None between loops
    loops: list = field(default_factory=list)
    units: dict = field(default_factory=dict)  # "<loop> / <optimizer>" -> {"loop", "optimizer", "first_grads"}
    optimizer_labels: dict = field(default_factory=dict)  # (loop, id(optimizer)) -> unit key
    loop_keys: dict = field(default_factory=dict)  # a PyTorch loop's key (loops.Site.key) -> its label
    capped_loops: set = field(default_factory=set)  # PyTorch loops ended at their cap
    last_capped: str | None = None
    step_lines: set = field(default_factory=set)  # script lines whose optimizer steps ran (PyTorch)
    step_counts: dict = field(default_factory=dict)  # unit -> its steps recorded (asked at every step)
    loop_aliases: dict = field(default_factory=dict)  # a loop's label -> the fuller one it is reported by
    crash: dict | None = None
    grads_taken: set = field(default_factory=set)  # ids of optimizers whose first gradients are kept
    policy_set: str | None = None
    policy_reader: object = None  # () -> the global policy's name, set by the bootstrap
    autocast_regions: dict = field(default_factory=dict)  # ((op, dtype, count), ...) -> regions that ran exactly these
    device: str | None = None  # where the first recorded step's parameters live ("cuda:0 (NVIDIA H200)", "cpu")
    instrumentation_error: dict | None = None  # failures.py: mplint's own code raised

    def autocast_region(self, counts) -> None:
        """The ops one torch autocast region ran, by output dtype (regions alike are counted once)."""
        if counts:
            key = tuple(sorted((op, dtype, n) for (op, dtype), n in counts.items()))
            with self.lock:
                self.autocast_regions[key] = self.autocast_regions.get(key, 0) + 1

    @property
    def cap(self) -> int:
        return int(self.config["steps"])

    def note(self, kind: str, text: str) -> None:
        if text not in self.events[kind]:
            self.events[kind].append(text)

    def see_model(self, model, keras: int, dtypes) -> None:
        key = str(id(model))
        seen = self.models.get(key)
        if seen is None:
            name = getattr(model, "name", None)  # a torch module has none: its class names it
            name = name if isinstance(name, str) else type(model).__name__
            same = sum(1 for m in self.models.values() if m.name == name or m.name.startswith(name + " #"))
            seen = self.models[key] = ModelSeen(
                f"{name} #{same + 1}" if same else name, type(model).__name__, keras, model
            )  # two torch Linear modules told apart
        # one name per dtype: a Keras model on the torch backend is also a torch module, and its
        # tensors' dtypes print as "torch.float32"
        seen.output_dtypes.update(str(d).replace("torch.", "") for d in dtypes)
        self.current_model = key

    def model_of(self, variables) -> str | None:
        """The seen model owning most of ``variables`` (an optimizer's update target)."""
        ids = {id(v) for v in variables}
        best, overlap = None, 0
        for key, seen in self.models.items():
            try:
                variables = getattr(seen.model, "trainable_variables", None)
                if variables is None and hasattr(seen.model, "parameters"):  # a torch module
                    variables = list(seen.model.parameters())
                owned = sum(1 for v in variables or [] if id(v) in ids)
            except Exception:  # a model half built
                continue
            if owned > overlap:
                best, overlap = key, owned
        return best

    def start_loop(self, kind: str, label: str | None = None) -> str:
        """A new training loop (``fit()``, ``custom loop``, or a PyTorch loop named by ``label``): it gets
        its own step cap."""
        with self.lock:
            if len(self.loops) >= MAX_LOOPS:
                self.note(
                    "loop_stops", f"stopped before training loop {len(self.loops) + 1} (at most {MAX_LOOPS} are run)"
                )
                self.finish("step-cap")
            number = sum(1 for known in self.loops if known.startswith(kind)) + 1
            self.loop = label or f"{kind} #{number}"
            self.loops.append(self.loop)
            return self.loop

    def enter_loop(self, key, label) -> str:
        """Make the loop known by ``key`` the current one, started on its first step and named then by ``label()``
        (asked at every step: naming a loop costs more than the lookup)."""
        with self.lock:
            if key not in self.loop_keys:
                self.loop_keys[key] = self.start_loop("", label())
            self.loop = self.loop_keys[key]
            return self.loop

    def steps_of(self, unit: str) -> int:
        return self.step_counts.get(unit, 0)

    def unit_of(self, optimizer_id: int, optimizer_label: str) -> str:
        loop = self.loop or self.start_loop("custom loop")
        key = (loop, optimizer_id)
        if key not in self.optimizer_labels:
            unit = f"{loop} / {optimizer_label}"
            same = sum(
                1 for known in self.units.values() if known["loop"] == loop and known["optimizer"] == optimizer_label
            )
            unit += f" #{same + 1}" if same else ""  # two optimizers of one class (a GAN's two Adams)
            self.optimizer_labels[key] = unit
            self.units[unit] = {"loop": loop, "optimizer": optimizer_label, "first_grads": None, "first_update": None}
        return self.optimizer_labels[key]

    def record_step(
        self,
        optimizer_id: int,
        optimizer_label: str,
        model: str | None,
        loss,
        finite_grads,
        scale,
        grads=None,
        update: float | None = None,
        at: float | None = None,
    ) -> None:
        """One optimizer application, ended at ``at`` (``time.perf_counter()``; now by default). Outside fit(), an
        optimizer's step past the cap stops the script for good: every optimizer of the loop has then made its
        capped steps."""
        with self.lock:
            if self.finished:
                return
            unit = self.unit_of(optimizer_id, optimizer_label)
            if not self.in_fit and self.steps_of(unit) >= self.cap:
                self.finish("step-cap")
            self.step_counts[unit] = self.steps_of(unit) + 1
            self.steps.append(
                Step(
                    loss,
                    bool(finite_grads),
                    scale,
                    time.perf_counter() if at is None else at,
                    model or self.current_model,
                    unit,
                )
            )
            if grads is not None and self.units[unit]["first_grads"] is None:
                self.units[unit]["first_grads"] = grads
                self.grads_taken.add(optimizer_id)
            if update is not None and self.units[unit]["first_update"] is None:
                self.units[unit]["first_update"] = update
                self.grads_taken.add(optimizer_id)

    def records(self, status: str, detail: str = "") -> dict:
        from mplint.runtime.model_checks import check_model

        models = []
        for key, seen in self.models.items():
            steps = [s for s in self.steps if s.model == key]
            policies: dict[str, int] = {}
            for layer in getattr(seen.model, "layers", []):
                policy = getattr(getattr(layer, "dtype_policy", None), "name", None) or str(getattr(layer, "dtype", ""))
                policies[policy] = policies.get(policy, 0) + 1
            try:
                static = [f.to_dict() for f in check_model(seen.model)]
            except Exception as exc:  # a model check must never hide the run's records
                static = [{"rule": "", "name": "", "message": f"check_model failed: {exc}", "layer": None}]
            models.append(
                {
                    "key": key,
                    "name": seen.name,
                    "class": seen.cls,
                    "keras": seen.keras,
                    "output_dtypes": sorted(seen.output_dtypes),
                    "layer_policies": policies,
                    "trained_steps": len(steps),
                    "model_findings": static,
                    "parameter_dtypes": sorted({str(p.dtype).replace("torch.", "") for p in seen.model.parameters()})
                    if seen.keras == 0
                    else [],
                }
            )
        names = {m["key"]: m["name"] for m in models}
        units = []
        for unit, info in self.units.items():
            steps = [s for s in self.steps if s.unit == unit]
            trained = [s.model for s in steps if s.model is not None]
            model = max(set(trained), key=trained.count) if trained else None
            loop = self.loop_aliases.get(info["loop"], info["loop"])
            units.append(
                {
                    "unit": loop + unit[len(info["loop"]) :],
                    "loop": loop,
                    "optimizer": info["optimizer"],
                    "model": names.get(model),
                    "model_key": model,
                    "losses": [s.loss for s in steps],
                    "finite_grads": [s.finite_grads for s in steps],
                    "loss_scale": [s.scale for s in steps],
                    "step_times": [s.time for s in steps],
                    "first_update": info["first_update"],
                }
            )
        try:
            policy = self.policy_set or (self.policy_reader() if self.policy_reader else None)
        except Exception:
            policy = None
        return {
            "status": status,
            "detail": detail,
            "policy": policy,
            "steps": len(self.steps),
            "cap": self.cap,
            "models": models,
            "units": units,
            "loops": [self.loop_aliases.get(loop, loop) for loop in self.loops],
            "crash": self.crash,
            "instrumentation_error": self.instrumentation_error,
            "device": self.device,
            "events": self.events,
            "autocast_regions": [
                {"regions": n, "ops": [list(op) for op in key]} for key, n in self.autocast_regions.items()
            ],
        }

    def finish(self, status: str, detail: str = "", exit_code: int = 0) -> NoReturn:
        """Write the records and end the process: nothing in the script can catch this."""
        self.finished = True
        try:
            data = self.records(status, detail)
        except Exception as exc:
            data = {"status": "internal-error", "detail": f"recording failed: {exc!r}", "models": [], "steps": 0}
        out = self.config["records"]
        with _real_open(out + ".tmp", "w", encoding="utf-8") as fh:
            json.dump(data, fh, default=str)
        os.replace(out + ".tmp", out)
        arrays = {
            f"u{k}_{i}": g
            for k, info in enumerate(self.units.values())
            for i, g in enumerate(info["first_grads"] or [])
        }
        if arrays:
            save_grads(self.config["records"], arrays)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(exit_code)


def save_grads(records: str, arrays: dict) -> None:
    """The first steps' gradients (NumPy arrays, or CPU tensors of PyTorch) beside the records: ``.grads.npz``, or
    ``.grads.pt`` where NumPy is not installed (a machine with only torch), which the parent reads with torch."""
    try:
        import numpy as np
    except ImportError:
        import torch

        torch.save(arrays, records + ".grads.pt")
        return
    np.savez(records + ".grads.npz", **{name: np.asarray(g) for name, g in arrays.items()})


RECORDER: Recorder | None = None
