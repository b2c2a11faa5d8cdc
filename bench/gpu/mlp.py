"""An MLP's training step under float16 autocast with a GradScaler, timed two ways for bench/gpu/check.

As a script it trains (``--steps`` steps): ``mplint verify bench/gpu/mlp.py --benchmark -- --width 512`` times it
instrumented. With ``--time`` it times the same step itself, uninstrumented, under float16 and under float32 (autocast
and the scaler made with ``enabled=False``, as verify's float32 reference turns them off), and prints JSON. A step's
time is what ``mplint verify --benchmark`` calls one: from the end of one optimizer step to the end of the next, the
GPU finished (a CUDA event recorded after each step and waited for; the CPU's clock elsewhere), the first
``WARMUP_STEPS`` gaps left out, the median of the rest. ``throughput_ms`` is the mean of as many steps run back to
back without waiting, for comparison."""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

WARMUP_STEPS = 2  # mplint.verify.report.WARMUP_STEPS (tests/test_gpu_check.py checks they agree)


def arguments(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--inputs", type=int, default=784)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--layers", type=int, default=3, help="Linear layers, the last one making the classes")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--time", action="store_true", help="time the step uninstrumented and print JSON")
    return p.parse_args(argv)


def training_step(args: argparse.Namespace, mixed: bool = True):
    torch.manual_seed(0)
    device = args.device
    layers: list = []
    size = args.inputs
    for _ in range(args.layers - 1):
        layers += [torch.nn.Linear(size, args.width), torch.nn.ReLU()]
        size = args.width
    model = torch.nn.Sequential(*layers, torch.nn.Linear(size, args.classes)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    scaler = torch.amp.GradScaler(device, enabled=mixed)
    x = torch.randn(args.batch, args.inputs, device=device)
    y = torch.randint(0, args.classes, (args.batch,), device=device)

    def step():
        with torch.autocast(device, dtype=torch.float16, enabled=mixed):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    return step


def _step_ends(step, steps: int, device: str) -> list[float]:
    """Milliseconds between the ends of consecutive steps, each step finished before the next starts."""
    if device.startswith("cuda"):
        events = []
        for _ in range(steps):
            step()
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            event.synchronize()
            events.append(event)
        return [a.elapsed_time(b) for a, b in zip(events, events[1:])]
    ends = []
    for _ in range(steps):
        step()
        ends.append(time.perf_counter())
    return [(b - a) * 1000.0 for a, b in zip(ends, ends[1:])]


def _throughput(step, steps: int, device: str) -> float:
    synchronize = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    synchronize()
    return (time.perf_counter() - start) * 1000.0 / steps


def timings(args: argparse.Namespace) -> dict:
    found = {}
    for label, mixed in (("float16", True), ("float32", False)):
        step = training_step(args, mixed)
        gaps = _step_ends(step, args.steps, args.device)[WARMUP_STEPS:]
        found[label] = {
            "ms_per_step": statistics.median(gaps),
            "throughput_ms": _throughput(step, args.steps, args.device),
        }
    found["speedup"] = found["float32"]["ms_per_step"] / found["float16"]["ms_per_step"]
    return found


def main() -> None:
    args = arguments()
    if args.time:
        print(json.dumps(timings(args)))
        return
    step = training_step(args)
    for _ in range(args.steps):
        step()


if __name__ == "__main__":
    main()
