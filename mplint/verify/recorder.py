"""What the instrumented process remembers, and how it writes it out for the parent."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field

_real_open = open


@dataclass
class Step:
    loss: float | None
    finite_grads: bool
    scale: float | None
    time: float
    model: str | None


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
    first_grads: list | None = None
    events: dict = field(default_factory=lambda: {"downloads_blocked": [], "writes_redirected": [],
                                                  "datasets_replaced": [], "notes": []})
    in_fit: int = 0
    lock: threading.Lock = field(default_factory=threading.RLock)
    finished: bool = False
    policy_set: str | None = None
    policy_reader: object = None  # () -> the global policy's name, set by the bootstrap

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
            seen = self.models[key] = ModelSeen(getattr(model, "name", "model"), type(model).__name__, keras, model)
        seen.output_dtypes.update(dtypes)
        self.current_model = key

    def record_step(self, loss, finite_grads, scale, grads=None) -> None:
        """One optimizer application. Stops the script for good at the cap outside fit()."""
        with self.lock:
            if self.finished:
                return
            self.steps.append(Step(loss, bool(finite_grads), scale, time.perf_counter(), self.current_model))
            if grads is not None and self.first_grads is None:
                self.first_grads = grads
            if not self.in_fit and len(self.steps) >= self.cap:
                self.finish("step-cap")

    def records(self, status: str, detail: str = "") -> dict:
        from mplint.runtime.model_checks import check_model

        models = []
        for key, seen in self.models.items():
            steps = [s for s in self.steps if s.model == key]
            if not steps and not seen.output_dtypes:
                continue
            policies: dict[str, int] = {}
            for layer in getattr(seen.model, "layers", []):
                policy = getattr(getattr(layer, "dtype_policy", None), "name", None) or str(getattr(layer, "dtype", ""))
                policies[policy] = policies.get(policy, 0) + 1
            try:
                static = [f.to_dict() for f in check_model(seen.model)]
            except Exception as exc:  # a model check must never hide the run's records
                static = [{"rule": "", "name": "", "message": f"check_model failed: {exc}", "layer": None}]
            models.append({
                "name": seen.name, "class": seen.cls, "keras": seen.keras,
                "output_dtypes": sorted(seen.output_dtypes), "layer_policies": policies,
                "losses": [s.loss for s in steps], "finite_grads": [s.finite_grads for s in steps],
                "loss_scale": [s.scale for s in steps], "step_times": [s.time for s in steps],
                "model_findings": static,
            })
        models.sort(key=lambda m: -len(m["losses"]))
        try:
            policy = self.policy_set or (self.policy_reader() if self.policy_reader else None)
        except Exception:
            policy = None
        return {"status": status, "detail": detail, "policy": policy, "steps": len(self.steps), "cap": self.cap,
                "models": models, "events": self.events}

    def finish(self, status: str, detail: str = "", exit_code: int = 0) -> None:
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
        if self.first_grads is not None:
            import numpy as np

            np.savez(self.config["records"] + ".grads.npz", *self.first_grads)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(exit_code)


RECORDER: Recorder | None = None
