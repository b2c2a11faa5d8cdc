"""bench/gpu/check, the one command that checks mplint on a GPU machine, run here the way it runs on a CPU
(``--device cpu``: the CUDA fixtures with "cuda" read as "cpu", the proofs' ``[cpu]`` cases, the documented example,
the benchmark beside its uninstrumented timing), and its judgements on made-up results."""

from __future__ import annotations

import argparse
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CHECK = REPO / "bench" / "gpu" / "check"


def _module(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_gpu_{name}", REPO / "bench" / "gpu" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


gpu_check = _module("gpu_check")


def test_every_cuda_fixture_has_what_the_catalog_predicts_on_each_device():
    fixtures = sorted(path.name for path in (REPO / "fixtures" / "verify").glob("cuda_*.py"))
    assert sorted(gpu_check.EXPECTED) == fixtures
    assert all(set(expected) == {"cuda", "cpu"} for expected in gpu_check.EXPECTED.values())


def test_the_uninstrumented_timing_leaves_out_the_warm_up_steps_verify_leaves_out():
    pytest.importorskip("torch", reason="torch is not installed: bench/gpu/mlp.py trains with it")
    from mplint.verify.report import WARMUP_STEPS

    assert _module("mlp").WARMUP_STEPS == WARMUP_STEPS


def _arguments(**changes) -> argparse.Namespace:
    return argparse.Namespace(**{**vars(gpu_check.arguments(["--device", "cpu"])), **changes})


def test_a_fixture_off_its_prediction_fails_the_check(monkeypatch):
    reports = {
        "cuda_clip_before_unscale.py": {"exit_code": 0, "fixed_rules": ["MPT204"], "verdict": gpu_check.VERIFIED},
        "cuda_bfloat16.py": {"exit_code": 3, "fixed_rules": ["MPT206"], "verdict": "worse: the fixed script crashes"},
    }
    monkeypatch.setattr(gpu_check, "verify_fixture", lambda name, *rest: (name, reports[name], ""))
    section = gpu_check.fixtures_section(_arguments(fixture=sorted(reports)), None, [])
    assert section.lines[2:] == [
        "| cuda_bfloat16.py | exit 0, fixes MPT206 | 3 | MPT206 | worse: the fixed script crashes | no |",
        f"| cuda_clip_before_unscale.py | exit 0, fixes MPT204 | 0 | MPT204 | {gpu_check.VERIFIED} | yes |",
    ]
    assert section.failures == ["cuda_bfloat16.py: exit 3, fixed ['MPT206']: worse: the fixed script crashes"]


def test_a_gpu_below_the_fixtures_compute_capability_skips_it(monkeypatch):
    monkeypatch.setattr(gpu_check, "verify_fixture", lambda name, *rest: pytest.fail(f"{name} ran"))
    section = gpu_check.fixtures_section(_arguments(device="cuda", fixture=["cuda_bfloat16.py"]), (7, 0), [])
    assert section.lines[2:] == [
        "| cuda_bfloat16.py | exit 0, fixes MPT206 | - | - | skipped: needs compute capability 8.0 | - |"
    ]
    assert section.failures == []


def test_pytests_outcomes_are_read_from_its_junit_report(tmp_path):
    report = tmp_path / "junit.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.test_torch_executed" name="test_k[cpu]"/>'
        '<testcase classname="tests.test_torch_executed" name="test_k[cuda]">'
        '<skipped type="pytest.skip" message="no CUDA device here">skipped</skipped></testcase>'
        '<testcase classname="tests.test_torch_runtime" name="test_x[cpu]">'
        '<failure message="assert 1 == 2&#10;more">trace</failure></testcase>'
        "</testsuite></testsuites>"
    )
    assert gpu_check._junit(report) == [
        ("test_torch_executed::test_k[cpu]", "passed", ""),
        ("test_torch_executed::test_k[cuda]", "skipped", "no CUDA device here"),
        ("test_torch_runtime::test_x[cpu]", "failed", "assert 1 == 2"),
    ]


def test_the_check_runs_on_the_cpu_and_writes_its_results(tmp_path):
    """One fixture, one proof, the example and the small model: each part of the check, on this CPU."""
    pytest.importorskip("torch", reason="torch is not installed: the check runs PyTorch")
    done = subprocess.run(
        [str(CHECK), "--device", "cpu", "--out", str(tmp_path), "--fixture", "cuda_masked_fill.py", "--steps", "2"]
        + ["--proofs", "test_k and cpu]", "--models", "small", "--bench-steps", "6", "--jobs", "1"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    (results,) = tmp_path.glob("gpu-*-cpu.md")
    text = results.read_text()
    assert done.returncode == 0, text
    assert done.stdout == f"ok: {results}\n"
    assert "- result: every check holds\n" in text
    assert re.search(
        r"\| cuda_masked_fill\.py \| exit 0, fixes MPT601 \| 0 \| MPT601 \| verified repair: .* \| yes \|", text
    )
    assert (
        "| test_torch_executed::test_k_bce_under_cuda_autocast_raises_and_the_logits_form_trains[cpu] | passed |"
        in text
    )
    assert (
        "```console\nfloat32 - no CUDA GPU: float32 on CPU unless asked (reduced precision is rarely faster there)\n"
        "MP806 2 model output is float16\n2 steps\n```"
    ) in text
    rows = re.findall(
        r"^\|[^|]*\| (float16|float32|speed-up) \| [\d.]+ (?:ms|x) \| [\d.]+ (?:ms|x) \| [+-][\d.]+% \| "
        r"not judged on CPU \|$",
        text,
        re.MULTILINE,
    )
    assert rows == ["float16", "float32", "speed-up"]
