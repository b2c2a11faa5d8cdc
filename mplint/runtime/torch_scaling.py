"""``Scaler``: one training-loop spelling for float32, bfloat16 and float16 (GradScaler) on every torch.

The order GradScaler needs is kept here so a loop cannot get it wrong: gradients are unscaled before they are
clipped (MPT204: a clip on scaled gradients is 65536x too tight), unscaled once per step (MPT203), the optimizer is
stepped through the scaler (MPT202) and the scale updated once per step, not per micro-batch (accumulation).
"""

from __future__ import annotations


class Scaler:
    """``backward(loss)`` for every micro-batch, ``step(optimizer, max_norm=...)`` after each one.

    With ``accumulation_steps=n`` the loss is divided by ``n`` and ``step`` applies the gradients of every ``n``-th
    call only; the loss scale stays fixed in between. ``grad_scaler`` is a torch GradScaler (float16) or None.
    """

    def __init__(self, grad_scaler=None, *, accumulation_steps: int = 1):
        if accumulation_steps < 1:
            raise ValueError(f"accumulation_steps must be at least 1, not {accumulation_steps!r}")
        self.grad_scaler = grad_scaler
        self.accumulation_steps = accumulation_steps
        self.steps = 0  # optimizer steps taken
        self.skipped = 0  # steps GradScaler skipped for inf/NaN gradients
        self._pending = 0  # backward passes since the last step

    @property
    def scale(self) -> float:
        return float(self.grad_scaler.get_scale()) if self.grad_scaler is not None else 1.0

    def backward(self, loss, **options) -> bool:
        """Backpropagate ``loss`` (scaled under float16, divided by ``accumulation_steps``); True when a step is due."""
        if self.accumulation_steps > 1:
            loss = loss / self.accumulation_steps
        (self.grad_scaler.scale(loss) if self.grad_scaler is not None else loss).backward(**options)
        self._pending += 1
        return self._pending >= self.accumulation_steps

    def step(
        self,
        *optimizers,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        clip_value: float | None = None,
        parameters=None,
        zero_grad: bool = True,
    ) -> bool:
        """Unscale, clip (``max_norm`` by norm, ``clip_value`` by value, over ``parameters`` or every parameter of the
        optimizers), step each optimizer and update the scale, then ``zero_grad()``. Returns True when the optimizers
        stepped; False while micro-batches are still accumulating or when GradScaler skipped the step (inf/NaN)."""
        import torch

        if not optimizers:
            raise TypeError("step() needs at least one optimizer")
        if self._pending < self.accumulation_steps:
            return False
        self._pending = 0
        scaler = self.grad_scaler
        if max_norm is not None or clip_value is not None:
            if scaler is not None:
                for optimizer in optimizers:
                    scaler.unscale_(optimizer)  # the clip must see the true gradients
            params = (
                list(parameters)
                if parameters is not None
                else [p for optimizer in optimizers for group in optimizer.param_groups for p in group["params"]]
            )
            if max_norm is not None:
                torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type=norm_type)
            if clip_value is not None:
                torch.nn.utils.clip_grad_value_(params, clip_value)
        stepped = True
        if scaler is None:
            for optimizer in optimizers:
                optimizer.step()
        else:
            before = self.scale
            for optimizer in optimizers:
                scaler.step(optimizer)
            scaler.update()
            stepped = self.scale >= before  # GradScaler lowers the scale exactly when it skipped the step
        if stepped:
            self.steps += 1
        else:
            self.skipped += 1
        if zero_grad:
            for optimizer in optimizers:
                optimizer.zero_grad()
        return stepped

    def state_dict(self) -> dict:
        return {
            "grad_scaler": self.grad_scaler.state_dict() if self.grad_scaler is not None else None,
            "steps": self.steps,
            "skipped": self.skipped,
        }

    def load_state_dict(self, state: dict) -> None:
        if self.grad_scaler is not None and state.get("grad_scaler"):
            self.grad_scaler.load_state_dict(state["grad_scaler"])
        self.steps, self.skipped = state.get("steps", 0), state.get("skipped", 0)
