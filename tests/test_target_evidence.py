"""The target as a version range from each form of evidence real projects use, and findings/fixes for that range."""

from __future__ import annotations

import pytest
from conftest import KERAS_LOOP, PER_LAYER, lint_json, target_lines, write_files

from mplint.cli import main
from mplint.knowledge import ngc_images
from mplint.project.images import dockerfile_image

KERAS2_LOOP = """\
import tensorflow as tf

optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())


def step(tape, loss, variables):
    grads = tape.gradient(optimizer.get_scaled_loss(loss), variables)
    optimizer.apply_gradients(zip(grads, variables))
"""

TORCH_LOOP = """\
import torch

model = torch.nn.Linear(8, 8).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x in range(3):
    with torch.cuda.amp.autocast():
        loss = model(torch.randn(4, 8).cuda()).sum()
    loss.backward()
    opt.step()
"""


_run = lint_json
_facts = target_lines


@pytest.mark.parametrize(
    "dockerfile",
    [
        "ARG FROM_IMAGE_NAME=nvcr.io/nvidia/tensorflow:21.02-tf2-py3\nFROM ${FROM_IMAGE_NAME}\nCOPY . /workspace\n",
        "ARG FROM_IMAGE_NAME=nvcr.io/nvidia/tensorflow:21.02-tf2-py3\nFROM $FROM_IMAGE_NAME AS base\nRUN pip install .\n"
        "FROM python:3.10 AS docs\nFROM base\n",
        "ARG TAG\nFROM nvcr.io/nvidia/tensorflow:${TAG:-21.02}-tf2-py3\n",
    ],
)
def test_substituted_tensorflow2_image_is_bounded_by_its_month_and_keras2_code_is_left_alone(
    tmp_path, capsys, dockerfile
):
    # No release notes of an NGC TensorFlow 2 release are in the verified table: the flavour says TF 2, and the
    # month says no TF released after February 2021 (2.4, of December 2020, is the newest): Keras 3 is out of reach.
    write_files(tmp_path, {".mplint.yaml": "{}\n", "Dockerfile": dockerfile, "train.py": KERAS2_LOOP})
    assert _facts(capsys, tmp_path) == [
        "target: G1 (TF 2.1-2.3) or Keras 2 (TF 2.0-2.4) (nvcr.io/nvidia/tensorflow:21.02-tf2-py3 in Dockerfile: TF 2.0-2.4)"
    ]
    assert _run(capsys, "--no-cache", "--select", "MP502", str(tmp_path)) == (0, [])


def test_a_tensorflow2_image_of_a_month_after_keras3_admits_keras3(tmp_path, capsys):
    dockerfile = "FROM nvcr.io/nvidia/tensorflow:24.05-tf2-py3\n"  # TF 2.16 (March 2024) had come out
    write_files(tmp_path, {".mplint.yaml": "{}\n", "Dockerfile": dockerfile, "train.py": KERAS2_LOOP})
    assert _facts(capsys, tmp_path) == [
        "target: G1 (TF 2.1-2.3) or Keras 2 or Keras 3 (TF 2.0-2.16) "
        "(nvcr.io/nvidia/tensorflow:24.05-tf2-py3 in Dockerfile: TF 2.0-2.16)"
    ]
    code, found = _run(capsys, "--no-cache", "--select", "MP502", str(tmp_path))
    assert (code, [(rule, line, safety) for rule, line, _, safety in found]) == (1, [("MP502", 7, "unsafe")])


@pytest.mark.parametrize(
    "image, tf",
    [
        ("nvcr.io/nvidia/tensorflow:22.12-tf1-py3", "TF 1.15"),
        ("nvcr.io/nvidia/tensorflow:22.10-tf1-py3", "TF 1.15"),  # between two rows
        ("nvcr.io/nvidia/tensorflow:20.06-tf1-py3", "TF 1.15"),  # NVIDIA's blog: 20.06 is TensorFlow 1.15.2
        ("nvcr.io/nvidia/tensorflow:21.02-tf1-py3", "TF 1.15"),  # between 20.06 (1.15.2) and 21.12 (1.15.5)
        ("nvcr.io/nvidia/tensorflow:22.01-tf1-py3", "TF 1.15"),  # NVIDIA's release tag v1.15.5+nv22.01
        # the unflavoured images before the tf1/tf2 split were TensorFlow 1
        ("nvcr.io/nvidia/tensorflow:18.07-py3", "TF 1.8"),  # "18.07 is based on TensorFlow 1.8.0"
        ("nvcr.io/nvidia/tensorflow:19.10-py3", "TF 1.10-1.15"),  # between 18.10 (1.10.0) and 20.06 (1.15.2)
    ],
)
def test_substituted_tensorflow1_image_is_its_verified_tf1_range(tmp_path, capsys, image, tf):
    dockerfile = f"ARG FROM_IMAGE_NAME={image}\nFROM ${{FROM_IMAGE_NAME}}\n"
    write_files(tmp_path, {".mplint.yaml": "{}\n", "Dockerfile": dockerfile, "train.py": KERAS2_LOOP})
    assert _facts(capsys, tmp_path) == [f"target: G0 (TF1) ({tf}) ({image} in Dockerfile: {tf})"]
    assert _run(capsys, "--no-cache", "--select", "MP502", str(tmp_path)) == (0, [])


def test_unflavoured_tensorflow_tag_after_the_split_is_bounded_by_its_month_only(tmp_path, capsys):
    # From 20.03 NVIDIA's notes name only -tf1-py3 and -tf2-py3 images: a plain 20.07-py3 says nothing of the
    # flavour, but no TF released after July 2020 (2.3) is in it.
    write_files(
        tmp_path,
        {".mplint.yaml": "{}\n", "train.py": KERAS2_LOOP, "Dockerfile": "FROM nvcr.io/nvidia/tensorflow:20.07-py3\n"},
    )
    assert _facts(capsys, tmp_path) == [
        "target: G1 (TF 2.1-2.3) (TF 2.0-2.3) (nvcr.io/nvidia/tensorflow:20.07-py3 in Dockerfile: TF 2.0-2.3)"
    ]


def test_keras3_image_in_the_stage_that_runs_makes_mp502_fix_safe(tmp_path, capsys):
    write_files(
        tmp_path,
        {
            ".mplint.yaml": "{}\n",
            "train.py": KERAS2_LOOP,
            "Dockerfile": "ARG BASE=tensorflow/tensorflow:2.16.1-gpu\nFROM nvcr.io/nvidia/tensorflow:21.02-tf2-py3 AS old\n"
            "FROM ${BASE} AS train\nFROM train\n",
        },
    )
    message = (
        "`get_scaled_loss` does not exist on Keras 3's LossScaleOptimizer (AttributeError): use `scale_loss` "
        "(target Keras 3 (TF 2.16), from tensorflow/tensorflow:2.16.1-gpu in Dockerfile: TF 2.16)"
    )
    assert _run(capsys, "--no-cache", "--select", "MP502", str(tmp_path)) == (1, [("MP502", 7, message, "safe")])


def test_unpinned_keras_loop_gets_no_mp502_fix_and_says_why(tmp_path, capsys):
    # Nothing says which TensorFlow runs the code: on Keras 2 `scale_loss` does not exist, so the rewrite is a guess.
    write_files(tmp_path, {".mplint.yaml": "{}\n", "train.py": KERAS2_LOOP})
    code, found = _run(capsys, "--no-cache", "--select", "MP502", str(tmp_path))
    assert (code, found) == (
        1,
        [
            (
                "MP502",
                7,
                (
                    "`get_scaled_loss` does not exist on Keras 3's LossScaleOptimizer (AttributeError): use `scale_loss` (target "
                    "G1 (TF 2.1-2.3) or Keras 2 or Keras 3 (TF >= 2.1), from no pin, config or Keras import: any supported "
                    "TensorFlow (set `target` or pin tensorflow); no fix: nothing says which TensorFlow runs this (set "
                    "`target` or pin tensorflow for one))"
                ),
                None,
            )
        ],
    )
    main(["--no-cache", "--fix", "--unsafe-fixes", "--select", "MP502", str(tmp_path)])
    assert (tmp_path / "train.py").read_text() == KERAS2_LOOP


def test_pin_spanning_keras2_and_keras3_keeps_the_unsafe_mp502_fix(tmp_path, capsys):
    # A pin is evidence of a range: a fix right on part of it is offered, as unsafe, and says where it holds.
    write_files(tmp_path, {".mplint.yaml": "{}\n", "requirements.txt": "tensorflow>=2.6\n", "train.py": KERAS2_LOOP})
    code, found = _run(capsys, "--no-cache", "--select", "MP502", str(tmp_path))
    assert (code, found) == (
        1,
        [
            (
                "MP502",
                7,
                (
                    "`get_scaled_loss` does not exist on Keras 3's LossScaleOptimizer (AttributeError): use `scale_loss` (target "
                    "Keras 2 or Keras 3 (TF >= 2.6), from requirements.txt pins tensorflow>=2.6; the fix holds on Keras 3 "
                    "only: set the target or pin TensorFlow >= 2.16 to make it safe)"
                ),
                "unsafe",
            )
        ],
    )
    main(["--no-cache", "--fix", "--select", "MP502", str(tmp_path)])
    assert (tmp_path / "train.py").read_text() == KERAS2_LOOP  # not applied without --unsafe-fixes
    main(["--no-cache", "--fix", "--unsafe-fixes", "--select", "MP502", str(tmp_path)])
    assert (tmp_path / "train.py").read_text() == KERAS2_LOOP.replace("get_scaled_loss", "scale_loss")


@pytest.mark.parametrize(
    "dockerfile",
    [
        "ARG FROM_IMAGE_NAME=nvcr.io/nvidia/pytorch:21.03-py3\nFROM ${FROM_IMAGE_NAME}\n",
        "ARG FROM_IMAGE_NAME=nvcr.io/nvidia/pytorch:21.03-py3\nFROM $FROM_IMAGE_NAME\n",
    ],
)
def test_pytorch_image_through_arg_is_bounded_by_the_verified_releases(tmp_path, capsys, dockerfile):
    write_files(tmp_path, {".mplint.yaml": "{}\n", "Dockerfile": dockerfile, "train.py": TORCH_LOOP})
    # between NVIDIA's 20.12 (1.8.0a0+1606899) and 21.09 (1.10.0a0+3fd9dcf); torch 1.8 was the newest release in
    # March 2021, so the image holds at most a 1.9 pre-release
    torch = "torch 1.8.0a0-1.9.0a0"
    assert _facts(capsys, tmp_path)[-1] == f"torch: {torch} (nvcr.io/nvidia/pytorch:21.03-py3 in Dockerfile: {torch})"
    code, found = _run(capsys, "--no-cache", "--select", "MPT201,MPT502", str(tmp_path))
    # torch.cuda.amp.autocast is deprecated from 2.4 only, which the range does not reach: no MPT502
    assert [(rule, line, safety) for rule, line, _, safety in found] == [("MPT201", 8, "safe")]
    main(["--no-cache", "--fix", "--select", "MPT201,MPT502", str(tmp_path)])
    assert (tmp_path / "train.py").read_text() == TORCH_LOOP.replace(
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n",
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nscaler = torch.cuda.amp.GradScaler()\n",
    ).replace(
        "    loss.backward()\n    opt.step()\n",
        "    scaler.scale(loss).backward()\n    scaler.step(opt)\n    scaler.update()\n",
    )


@pytest.mark.parametrize("form", ["${FROM_IMAGE_NAME}", "$FROM_IMAGE_NAME"])
def test_pytorch_24_10_through_arg_is_bounded_by_24_01_and_25_12(tmp_path, capsys, form):
    # 24.10's own notes are not stored: the range runs from 24.01 (2.2.0a0+81ea7a4) to the pre-release of the minor
    # after the newest torch of October 2024 (2.5: 2.6.0a0)
    write_files(
        tmp_path,
        {
            ".mplint.yaml": "{}\n",
            "train.py": TORCH_LOOP,
            "Dockerfile": f"ARG FROM_IMAGE_NAME=nvcr.io/nvidia/pytorch:24.10-py3\nFROM {form}\n",
        },
    )
    torch = "torch 2.2.0a0-2.6.0a0"
    assert _facts(capsys, tmp_path)[-1] == f"torch: {torch} (nvcr.io/nvidia/pytorch:24.10-py3 in Dockerfile: {torch})"
    code, found = _run(capsys, "--no-cache", "--select", "MPT502", str(tmp_path))
    # the range reaches 2.4, and torch.autocast("cuda") exists on all of it: the fix is safe
    assert (code, found) == (
        1,
        [
            (
                "MPT502",
                6,
                "`torch.cuda.amp.autocast` is deprecated since torch 2.4 (FutureWarning): "
                'write `torch.autocast("cuda")` (target torch 2.2.0a0-2.6.0a0, from '
                "nvcr.io/nvidia/pytorch:24.10-py3 in Dockerfile: torch 2.2.0a0-2.6.0a0)",
                "safe",
            )
        ],
    )


def test_pytorch_24_01_is_torch_2_2_and_draws_no_deprecation(tmp_path, capsys):
    # NVIDIA's own build of the 24.01 release is torch-2.2.0a0+81ea7a4.nv24.01: before the 2.4 deprecation
    write_files(
        tmp_path,
        {
            ".mplint.yaml": "{}\n",
            "train.py": TORCH_LOOP,
            "Dockerfile": "ARG FROM_IMAGE_NAME=nvcr.io/nvidia/pytorch:24.01-py3\nFROM ${FROM_IMAGE_NAME}\n",
        },
    )
    torch = "torch 2.2.0a0"
    assert _facts(capsys, tmp_path)[-1] == f"torch: {torch} (nvcr.io/nvidia/pytorch:24.01-py3 in Dockerfile: {torch})"
    assert _run(capsys, "--no-cache", "--select", "MPT502", str(tmp_path)) == (0, [])


@pytest.mark.parametrize(
    "files",
    [
        {
            "PKG-INFO": "Metadata-Version: 2.1\nName: trainer\nVersion: 0.1\nRequires-Dist: numpy\nRequires-Dist: torch>=1.7.0\n"
        },
        {"trainer-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: trainer\nRequires-Dist: torch>=1.7.0\n"},
    ],
)
def test_distribution_metadata_pins_torch(tmp_path, capsys, files):
    write_files(tmp_path, {".mplint.yaml": "{}\n", "train.py": TORCH_LOOP, **files})
    where = next(iter(files))
    assert _facts(capsys, tmp_path)[-1] == f"torch: torch >= 1.7 ({where} pins torch>=1.7.0)"
    code, found = _run(capsys, "--no-cache", "--select", "MPT502", str(tmp_path))
    # torch 1.7-1.9 have only torch.cuda.amp.autocast: no rewrite is right on the whole range
    assert found == [
        (
            "MPT502",
            6,
            "`torch.cuda.amp.autocast` is deprecated since torch 2.4 (FutureWarning): write "
            f'`torch.autocast("cuda")` (target torch >= 1.7, from {where} pins torch>=1.7.0); no automatic '
            "fix: `torch.autocast` exists from torch 1.10 only, and the range admits older torch (pin torch "
            ">= 1.10, or set `torch` in the config, for the fix)",
            None,
        )
    ]
    main(["--no-cache", "--fix", "--unsafe-fixes", "--select", "MPT502", str(tmp_path)])
    assert (tmp_path / "train.py").read_text() == TORCH_LOOP


@pytest.mark.parametrize(
    "setup_py, source",
    [
        (
            'from setuptools import setup\nrequirements = {"install": ["numpy", "tensorflow-gpu==2.7.0"], "dev": ["pytest"]}\n'
            'setup(name="x", install_requires=requirements["install"])\n',
            "setup.py pins tensorflow-gpu==2.7.0",
        ),
        (
            'from setuptools import setup\ntf_version_requirement = ">=2.4,<2.9"\nextras = dict(gpu=[])\n'
            'extras["tf"] = ["tensorflow" + tf_version_requirement]\nsetup(name="x", extras_require=extras)\n',
            "setup.py pins tensorflow<2.9,>=2.4",
        ),
        (
            'from setuptools import setup\nREQS = ["numpy"]\nREQS += ["tensorflow==2.8.0"]\nsetup(install_requires=REQS)\n',
            "setup.py pins tensorflow==2.8.0",
        ),
    ],
)
def test_setup_py_values_are_followed(tmp_path, capsys, setup_py, source):
    write_files(tmp_path, {".mplint.yaml": "{}\n", "setup.py": setup_py, "train.py": KERAS2_LOOP})
    facts = _facts(capsys, tmp_path)
    assert facts[0].startswith("target: Keras 2 (TF 2.") and facts[0].endswith(f"({source})")
    assert _run(capsys, "--no-cache", "--select", "MP502", str(tmp_path)) == (0, [])


@pytest.mark.parametrize(
    "pin_file, old, new",
    [
        ("sub/environment.yml", "dependencies:\n  - tensorflow=2.8\n", "dependencies:\n  - tensorflow=2.16\n"),
        ("sub/requirements.txt", "-r ../deps/base.txt\n", None),
        ("sub/Dockerfile", "FROM tensorflow/tensorflow:2.8.0-gpu\n", "FROM tensorflow/tensorflow:2.16.1\n"),
    ],
)
def test_a_nested_pin_changed_between_cached_runs_changes_the_target(tmp_path, capsys, pin_file, old, new):
    files = {".mplint.yaml": "{}\n", "sub/train.py": KERAS2_LOOP, pin_file: old, "deps/base.txt": "tensorflow==2.8.0\n"}
    write_files(tmp_path, files)
    assert _run(capsys, str(tmp_path), "--select", "MP502") == (0, [])  # Keras 2: cached
    if new is None:
        (tmp_path / "deps/base.txt").write_text("tensorflow==2.16.1\n")  # the included file, two folders away
    else:
        (tmp_path / pin_file).write_text(new)
    code, found = _run(capsys, str(tmp_path), "--select", "MP502")
    assert (code, [(rule, line, safety) for rule, line, _, safety in found]) == (1, [("MP502", 7, "safe")])


GUARDED = """\
import torch
from packaging import version

if version.parse(torch.__version__) < version.parse("2.4.0"):
    scaler = torch.cuda.amp.GradScaler()
else:
    scaler = torch.cuda.amp.GradScaler()
"""


def test_a_version_guard_narrows_the_range_and_is_never_rewritten(tmp_path, capsys):
    write_files(tmp_path, {".mplint.yaml": "{}\n", "requirements.txt": "torch>=2.4\n", "train.py": GUARDED})
    code, found = _run(capsys, "--no-cache", "--select", "MPT502", str(tmp_path))
    assert found == [
        (
            "MPT502",
            7,
            "`torch.cuda.amp.GradScaler` is deprecated since torch 2.4 (FutureWarning): write "
            '`torch.amp.GradScaler("cuda")` (target torch >= 2.4, from requirements.txt pins torch>=2.4); no '
            "automatic fix: a version test guards this code",
            None,
        )
    ]
    main(["--no-cache", "--fix", "--unsafe-fixes", "--select", "MPT502", str(tmp_path)])
    assert (tmp_path / "train.py").read_text() == GUARDED


FEATURE_GUARDED = """\
import torch

if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
    scaler = torch.amp.GradScaler("cuda")
else:
    scaler = torch.cuda.amp.GradScaler()

if not hasattr(torch.amp, "GradScaler"):
    old_scaler = torch.cuda.amp.GradScaler()

if hasattr(torch.amp, "GradScaler"):
    new_enough = torch.cuda.amp.GradScaler()

try:
    from torch.amp import GradScaler
except ImportError:
    from torch.cuda.amp import GradScaler

shim_scaler = GradScaler()

try:
    from torch.amp import custom_fwd
    fwd = custom_fwd(device_type="cuda")
except ImportError:
    fwd = torch.cuda.amp.custom_fwd()
"""


def test_feature_tests_give_each_arm_its_range(tmp_path, capsys):
    """``hasattr(torch.amp, "GradScaler")`` is true from torch 2.3 on, a ``from torch.amp import custom_fwd`` fails
    below 2.4: an arm that runs only below 2.4 never warns; the one that runs from 2.3 on does (and is not
    rewritten); a name the shim binds to torch.amp's class is the new API wherever torch has it."""
    write_files(tmp_path, {".mplint.yaml": "{}\n", "requirements.txt": "torch>=2.0\n", "train.py": FEATURE_GUARDED})
    code, found = _run(capsys, "--no-cache", "--select", "MPT502", str(tmp_path))
    assert (code, found) == (
        1,
        [
            (
                "MPT502",
                12,
                "`torch.cuda.amp.GradScaler` is deprecated since torch 2.4 (FutureWarning): "
                'write `torch.amp.GradScaler("cuda")` (target torch >= 2.0, from requirements.txt pins '
                "torch>=2.0); no automatic fix: a version test guards this code",
                None,
            )
        ],
    )
    main(["--no-cache", "--fix", "--unsafe-fixes", "--select", "MPT502", str(tmp_path)])
    assert (tmp_path / "train.py").read_text() == FEATURE_GUARDED


@pytest.mark.parametrize(
    "test, true, false",
    [
        ('hasattr(torch.amp, "GradScaler")', ">=2.3", "<2.3"),
        ('not hasattr(torch.amp, "custom_fwd")', "<2.4", ">=2.4"),
        (
            'hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler")',
            ">=2.3",
            None,
        ),  # false also where torch.amp lacks
        ('hasattr(torch.amp, "GradScaler") and hasattr(torch.amp, "custom_fwd")', ">=2.3,>=2.4", "<2.4"),
        ('hasattr(torch.amp, "GradScaler") or torch.__version__ >= "2.4"', ">=2.3", "<2.3,<2.4"),
        ('hasattr(opt, "GradScaler")', None, None),
        ('version.parse(torch.__version__) < version.parse("2.4.0")', "<2.4.0", ">=2.4.0"),
    ],
)
def test_guard_arms(test, true, false):
    from mplint.analysis.version_guards import guard_arms

    assert tuple(str(s) if s is not None else None for s in guard_arms(test, "torch")) == (true, false)


PT = "https://docs.nvidia.com/deeplearning/frameworks/pytorch-release-notes/"
JETSON_24_01 = (
    "https://developer.download.nvidia.com/compute/redist/jp/v60dp/pytorch/"
    "torch-2.2.0a0+81ea7a4.nv24.01-cp310-cp310-linux_aarch64.whl"
)
TF = "https://docs.nvidia.com/deeplearning/dgx/tensorflow-release-notes/"
NV_TF1 = "https://github.com/NVIDIA/tensorflow/releases"
TF_BLOG = "https://developer.nvidia.com/blog/accelerating-tensorflow-on-a100-gpus/"


@pytest.mark.parametrize(
    "table, release, bounds, sources",
    [
        # the verified rows, each with the page that states it
        (ngc_images.PYTORCH, (19, 6), ("1.1.0", "1.1.0"), [PT + "rel_19-06.html"]),
        (ngc_images.PYTORCH, (19, 8), ("1.2.0a0", "1.2.0a0"), [PT + "rel_20-12.html"]),
        (ngc_images.PYTORCH, (19, 9), ("1.2.0", "1.2.0"), [PT + "rel_20-12.html"]),
        (ngc_images.PYTORCH, (19, 10), ("1.3.0a0", "1.3.0a0"), [PT + "rel_20-12.html"]),
        (ngc_images.PYTORCH, (20, 2), ("1.4.0a0", "1.4.0a0"), [PT + "rel_20-02.html"]),
        (ngc_images.PYTORCH, (20, 3), ("1.5.0a0", "1.5.0a0"), [PT + "rel_20-03.html"]),
        (ngc_images.PYTORCH, (20, 7), ("1.6.0a0", "1.6.0a0"), [PT + "rel_20-12.html"]),
        (ngc_images.PYTORCH, (20, 10), ("1.7.0a0", "1.7.0a0"), [PT + "rel_20-12.html"]),
        (ngc_images.PYTORCH, (20, 11), ("1.8.0a0", "1.8.0a0"), [PT + "rel_20-12.html"]),
        (ngc_images.PYTORCH, (20, 12), ("1.8.0a0", "1.8.0a0"), [PT + "rel_20-12.html"]),
        (ngc_images.PYTORCH, (21, 9), ("1.10.0a0", "1.10.0a0"), [PT + "rel_21-09.html"]),
        (ngc_images.PYTORCH, (22, 11), ("1.13.0a0", "1.13.0a0"), [PT + "rel-22-11.html"]),
        (ngc_images.PYTORCH, (25, 12), ("2.10.0a0", "2.10.0a0"), [PT + "rel-25-12.html"]),
        (
            ngc_images.TENSORFLOW1,
            (18, 5),
            ("1.7.0", "1.7.0"),
            ["https://docs.nvidia.com/deeplearning/frameworks/tensorflow-release-notes/rel_18.05.html"],
        ),
        (ngc_images.TENSORFLOW1, (18, 7), ("1.8.0", "1.8.0"), [TF + "rel_18.07.html"]),
        (ngc_images.TENSORFLOW1, (18, 10), ("1.10.0", "1.10.0"), [TF + "rel_18.10.html"]),
        (ngc_images.TENSORFLOW1, (20, 6), ("1.15.2", "1.15.2"), [TF_BLOG]),
        *(
            (ngc_images.TENSORFLOW1, (yy, mm), ("1.15.5", "1.15.5"), [NV_TF1 + f"/tag/v1.15.5%2Bnv{yy}.{mm:02d}"])
            for yy, mm in ((21, 12), (22, 1), (22, 2), (22, 3), (22, 4), (22, 5), (22, 6), (22, 8), (22, 9), (22, 10))
        ),
        *(
            (ngc_images.TENSORFLOW1, release, ("1.15.5", "1.15.5"), [NV_TF1])
            for release in ((22, 11), (22, 12), (23, 1), (23, 2), (23, 3))
        ),
        # a release between verified rows is bounded by them; before the first or after the last, on one side only
        (ngc_images.PYTORCH, (21, 3), ("1.8.0a0", "1.10.0a0"), [PT + "rel_20-12.html", PT + "rel_21-09.html"]),
        (ngc_images.PYTORCH, (20, 6), ("1.5.0a0", "1.6.0a0"), [PT + "rel_20-03.html", PT + "rel_20-12.html"]),
        (ngc_images.PYTORCH, (22, 4), ("1.10.0a0", "1.13.0a0"), [PT + "rel_21-09.html", PT + "rel-22-11.html"]),
        (ngc_images.PYTORCH, (24, 1), ("2.2.0a0", "2.2.0a0"), [JETSON_24_01]),
        (ngc_images.PYTORCH, (23, 10), ("1.13.0a0", "2.2.0a0"), [PT + "rel-22-11.html", JETSON_24_01]),
        (ngc_images.PYTORCH, (24, 4), ("2.2.0a0", "2.10.0a0"), [JETSON_24_01, PT + "rel-25-12.html"]),
        (ngc_images.PYTORCH, (19, 5), (None, "1.1.0"), [PT + "rel_19-06.html"]),
        (ngc_images.PYTORCH, (26, 2), ("2.10.0a0", None), [PT + "rel-25-12.html"]),
        (ngc_images.TENSORFLOW1, (19, 10), ("1.10.0", "1.15.2"), [TF + "rel_18.10.html", TF_BLOG]),
        (ngc_images.TENSORFLOW1, (21, 2), ("1.15.2", "1.15.5"), [TF_BLOG, NV_TF1 + "/tag/v1.15.5%2Bnv21.12"]),
        (
            ngc_images.TENSORFLOW1,
            (22, 7),
            ("1.15.5", "1.15.5"),
            [NV_TF1 + "/tag/v1.15.5%2Bnv22.06", NV_TF1 + "/tag/v1.15.5%2Bnv22.08"],
        ),
        (
            ngc_images.TENSORFLOW1,
            (18, 1),
            (None, "1.7.0"),
            ["https://docs.nvidia.com/deeplearning/frameworks/tensorflow-release-notes/rel_18.05.html"],
        ),
    ],
)
def test_ngc_release_lookup_cites_nvidias_pages(table, release, bounds, sources):
    found = ngc_images.between(table, release)
    assert ((found.oldest, found.newest), [row.source for row in found.rows]) == (bounds, sources)
    assert ngc_images.between((), release) == ngc_images.Bounds(None, None, ())


def test_ngc_tables_move_forward_with_their_framework():
    # the bounds rest on each table being ordered by release with versions that never go back
    from packaging.version import Version

    for table in (ngc_images.PYTORCH, ngc_images.TENSORFLOW1):
        assert [row.release for row in table] == sorted({row.release for row in table})
        assert [Version(row.version) for row in table] == sorted(Version(row.version) for row in table)
        assert all(
            row.source.startswith(
                (
                    "https://docs.nvidia.com/",
                    "https://developer.nvidia.com/",
                    "https://github.com/NVIDIA/",
                    "https://developer.download.nvidia.com/",
                )
            )
            for row in table
        )


@pytest.mark.parametrize(
    "image, torch",
    [
        ("nvcr.io/nvidia/pytorch:20.02-py3", "torch 1.4.0a0"),
        ("nvcr.io/nvidia/pytorch:25.12-py3", "torch 2.10.0a0"),
        ("nvcr.io/nvidia/pytorch:19.10-py3", "torch 1.3.0a0"),
        ("nvcr.io/nvidia/pytorch:20.10-py3", "torch 1.7.0a0"),
        ("nvcr.io/nvidia/pytorch:21.09-py3", "torch 1.10.0a0"),
        ("nvcr.io/nvidia/pytorch:22.04-py3", "torch 1.10.0a0-1.12.0a0"),  # 1.11 was the newest in April 2022
        ("nvcr.io/nvidia/pytorch:24.04-py3", "torch 2.2.0a0-2.4.0a0"),  # 2.3 came out on 2024-04-24
        ("nvcr.io/nvidia/pytorch:24.01-py3", "torch 2.2.0a0"),
        ("nvcr.io/nvidia/pytorch:19.05-py3", ("torch <= 1.1", "torch <= 1.1.0")),  # the range drops a release's ".0"
        ("nvcr.io/nvidia/pytorch:26.01-py3", "torch 2.10.0a0-2.11.0a0"),  # 2.10 came out on 2026-01-21
        ("nvidian/pytorch:20.06-py3", "torch 1.5.0a0-1.6.0a0"),  # NVIDIA's internal registry, the same releases
        ("nvcr.io/nvidia/merlin/merlin-pytorch:23.02", "torch <= 1.14.0a0"),  # dated: 1.13 was the newest
    ],
)
def test_pytorch_image_tags_map_to_the_verified_range(tmp_path, capsys, image, torch):
    write_files(tmp_path, {".mplint.yaml": "{}\n", "Dockerfile": f"FROM {image}\n", "train.py": TORCH_LOOP})
    target, evidence = torch if isinstance(torch, tuple) else (torch, torch)
    assert _facts(capsys, tmp_path)[-1] == f"torch: {target} ({image} in Dockerfile: {evidence})"


def test_env_and_legacy_env_forms_substitute():
    assert (
        dockerfile_image("ENV IMG nvcr.io/nvidia/pytorch:22.04-py3\nFROM $IMG\n") == "nvcr.io/nvidia/pytorch:22.04-py3"
    )
    assert (
        dockerfile_image('ENV IMG="nvcr.io/nvidia/pytorch:22.04-py3"\nFROM ${IMG} AS a\nFROM a\n')
        == "nvcr.io/nvidia/pytorch:22.04-py3"
    )
    assert dockerfile_image("FROM ${UNSET}\n") == "${UNSET}"


MP201_HEAD = (
    "custom training loop under mixed_float16 set at train.py:3: it applies gradients with an optimizer that "
    "is not a LossScaleOptimizer, so small float16 gradients underflow to zero"
)
MP207_HEAD = (
    'layers use dtype="mixed_float16" but the global policy is float32, so compile() adds no '
    "LossScaleOptimizer: small float16 gradients underflow to zero"
)
UNPINNED = (
    "target G1 (TF 2.1-2.3) or Keras 2 or Keras 3 (TF >= 2.1), from no pin, config or Keras import: any "
    "supported TensorFlow (set `target` or pin tensorflow)"
)


@pytest.mark.parametrize(
    "pins, code, expected, fixed",
    [
        # Keras 2 and Keras 3 share the wrapper: safe on that range, in the shared spelling
        (
            {"requirements.txt": "tensorflow>=2.6\n"},
            PER_LAYER,
            [("MP207", 4, MP207_HEAD, "safe")],
            PER_LAYER.replace(
                "optimizer=tf.keras.optimizers.Adam()",
                "optimizer=tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())",
            ),
        ),
        # ... but not TF 2.1-2.3, which a pin such as tensorflow>=2.3 admits: unsafe there
        (
            {"requirements.txt": "tensorflow>=2.3\n"},
            PER_LAYER,
            [
                (
                    "MP207",
                    4,
                    f"{MP207_HEAD} (target G1 (TF 2.1-2.3) or Keras 2 or Keras 3 (TF >= 2.3), from requirements.txt "
                    "pins tensorflow>=2.3; the fix holds on Keras 2 or Keras 3 only: set the target or pin TensorFlow "
                    "to make it safe)",
                    "unsafe",
                )
            ],
            None,
        ),
        # ... and where nothing says which TensorFlow runs the code, no fix
        (
            {},
            PER_LAYER,
            [
                (
                    "MP207",
                    4,
                    f"{MP207_HEAD} ({UNPINNED}; no fix: nothing says which TensorFlow runs this (set `target` or pin "
                    "tensorflow for one))",
                    None,
                )
            ],
            None,
        ),
        # the scaling calls differ between Keras 2 and Keras 3: the Keras 3 ones hold on part of the range
        (
            {"requirements.txt": "tensorflow>=2.6\n"},
            KERAS_LOOP,
            [
                (
                    "MP201",
                    12,
                    (
                        f"{MP201_HEAD} (target Keras 2 or Keras 3 (TF >= 2.6), from requirements.txt pins tensorflow>=2.6; the fix "
                        "holds on Keras 3 only: set the target or pin TensorFlow to make it safe)"
                    ),
                    "unsafe",
                )
            ],
            None,
        ),
        (
            {"requirements.txt": "tensorflow==2.15.*\n"},
            KERAS_LOOP,
            [("MP201", 12, MP201_HEAD, "safe")],
            KERAS_LOOP.replace(
                "optimizer = tf.keras.optimizers.Adam()",
                "optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())",
            ).replace(
                "        loss = tf.reduce_mean(tf.square(model(x) - y))\n    grads = tape.gradient(loss, model.trainable_variables)\n",
                "        loss = tf.reduce_mean(tf.square(model(x) - y))\n        scaled_loss = optimizer.get_scaled_loss(loss)\n"
                "    grads = tape.gradient(scaled_loss, model.trainable_variables)\n"
                "    grads = optimizer.get_unscaled_gradients(grads)\n",
            ),
        ),
    ],
)
def test_loss_scale_optimizer_fixes_for_the_range(tmp_path, capsys, monkeypatch, pins, code, expected, fixed):
    write_files(tmp_path, {".mplint.yaml": "{}\n", "train.py": code, **pins})
    monkeypatch.chdir(tmp_path)
    rule = expected[0][0]
    assert _run(capsys, "--no-cache", "--select", rule, ".") == (1, expected)
    main(["--no-cache", "--fix", "--select", rule, "."])
    assert (tmp_path / "train.py").read_text() == (fixed or code)  # an unsafe fix waits for --unsafe-fixes


MPT201_HEAD = (
    "the loss comes from a float16 autocast region but `backward()` and the optimizer step run without a "
    "GradScaler: small gradients underflow to zero in float16; scale the loss with "
)
CPU_LOOP = TORCH_LOOP.replace(".cuda()", "").replace(
    "torch.cuda.amp.autocast()", 'torch.autocast("cpu", dtype=torch.float16)'
)


@pytest.mark.parametrize(
    "pins, code, advice, scaler",
    [
        (
            {"requirements.txt": "torch>=2.3\n"},
            TORCH_LOOP,
            '`torch.amp.GradScaler("cuda")`',
            'torch.amp.GradScaler("cuda")',
        ),
        ({}, TORCH_LOOP, "`torch.cuda.amp.GradScaler()`", "torch.cuda.amp.GradScaler()"),
        (
            {"requirements.txt": "torch>=2.4\n"},
            CPU_LOOP,
            '`torch.amp.GradScaler("cpu")`',
            'torch.amp.GradScaler("cpu")',
        ),
        (
            {},
            CPU_LOOP,
            "a GradScaler (`torch.amp.GradScaler(device)` from torch 2.3; target torch >= 1.10, from train.py:6 uses "
            "torch.autocast, which torch 1.10 added)",
            None,
        ),  # no pin, but the code's own torch.autocast exists from 1.10; no CPU GradScaler before 2.3: no fix
    ],
)
def test_mpt201_names_the_grad_scaler_its_fix_writes(tmp_path, capsys, pins, code, advice, scaler):
    write_files(tmp_path, {".mplint.yaml": "{}\n", "train.py": code, **pins})
    assert _run(capsys, "--no-cache", "--select", "MPT201", str(tmp_path)) == (
        1,
        [("MPT201", 8, MPT201_HEAD + advice, "safe" if scaler else None)],
    )
    main(["--no-cache", "--fix", "--select", "MPT201", str(tmp_path)])
    expected = (
        code
        if scaler is None
        else code.replace(
            "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n",
            f"opt = torch.optim.SGD(model.parameters(), lr=0.1)\nscaler = {scaler}\n",
        ).replace(
            "    loss.backward()\n    opt.step()\n",
            "    scaler.scale(loss).backward()\n    scaler.step(opt)\n    scaler.update()\n",
        )
    )
    assert (tmp_path / "train.py").read_text() == expected


KERAS3_CLIP = """\
import keras
import tensorflow as tf

keras.mixed_precision.set_global_policy("mixed_float16")
optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(1e-3))

with tf.GradientTape() as tape:
    scaled_loss = optimizer.scale_loss(tf.reduce_mean(tf.square(y - model(x))))
grads = tape.gradient(scaled_loss, model.trainable_variables)
grads, _ = tf.clip_by_global_norm(grads, 1.0)
optimizer.apply_gradients(zip(grads, model.trainable_variables))
"""
KERAS3_DOUBLE_UNSCALE = KERAS3_CLIP.replace(
    "grads, _ = tf.clip_by_global_norm(grads, 1.0)", "grads = [g / optimizer.dynamic_scale for g in grads]"
)
MP204_MESSAGE = (
    "gradients are clipped while still multiplied by the loss scale (apply_gradients unscales them only "
    "afterwards): the threshold is 32768x too tight"
)
MP203_MESSAGE = "apply_gradients already divides the gradients by the loss scale: this second unscale makes updates 32768x too small"
BOTH = (
    "target Keras 2 or Keras 3 (TF >= 2.6), from requirements.txt pins tensorflow>=2.6; the fix holds on Keras 3 "
    "only: set the target or pin TensorFlow to make it safe"
)


@pytest.mark.parametrize(
    "rule, code, head, fixed",
    [
        (
            "MP204",
            KERAS3_CLIP,
            MP204_MESSAGE,
            KERAS3_CLIP.replace(
                "keras.optimizers.Adam(1e-3)", "keras.optimizers.Adam(1e-3, global_clipnorm=1.0)"
            ).replace("grads, _ = tf.clip_by_global_norm(grads, 1.0)\n", ""),
        ),
        (
            "MP203",
            KERAS3_DOUBLE_UNSCALE,
            MP203_MESSAGE,
            KERAS3_DOUBLE_UNSCALE.replace("grads = [g / optimizer.dynamic_scale for g in grads]\n", ""),
        ),
    ],
)
@pytest.mark.parametrize("pin, safe", [("tensorflow>=2.16\n", True), ("tensorflow>=2.6\n", False)])
def test_keras3_unscale_fixes_are_safe_only_on_a_keras3_range(
    tmp_path, capsys, monkeypatch, rule, code, head, fixed, pin, safe
):
    # Keras 3's apply_gradients unscales and Keras 2's does not: both fixes rest on that.
    write_files(tmp_path, {".mplint.yaml": "{}\n", "requirements.txt": pin, "train.py": code})
    monkeypatch.chdir(tmp_path)
    message = head if safe else f"{head} ({BOTH})"
    assert _run(capsys, "--no-cache", "--select", rule, ".") == (1, [(rule, 10, message, "safe" if safe else "unsafe")])
    main(["--no-cache", "--fix", "--select", rule, "."])
    assert (tmp_path / "train.py").read_text() == (fixed if safe else code)


G1_POLICY = """\
from tensorflow.keras.mixed_precision import experimental as mixed_precision

mixed_precision.set_policy("mixed_float16")
"""
MP501_HEAD = "`from tensorflow.keras.mixed_precision import experimental` is the TF 2.1-2.3 experimental API, {fate}: "
MP501_FIX = "write `from tensorflow.keras import mixed_precision`; `set_policy` becomes `set_global_policy`"


@pytest.mark.parametrize(
    "pins, fate, target, safety",
    [
        (
            {},
            "deprecated on TF 2.4-2.8 and removed in TF 2.9 (ImportError there)",
            f"{UNPINNED}; no fix: nothing says which TensorFlow runs this (set `target` or pin tensorflow for one)",
            None,
        ),
        (
            {"requirements.txt": "tensorflow>=2.3\n"},
            "deprecated on TF 2.4-2.8 and removed in TF 2.9 (ImportError there)",
            "target G1 (TF 2.1-2.3) or Keras 2 or Keras 3 (TF >= 2.3), from requirements.txt pins tensorflow>=2.3; "
            "the fix holds on Keras 2 or Keras 3 only: set the target or pin TensorFlow to make it safe",
            "unsafe",
        ),
        (
            {"requirements.txt": "tensorflow>=2.9\n"},
            "removed in TF 2.9 (ImportError there)",  # no version of the range still ships it
            "target Keras 2 or Keras 3 (TF >= 2.9), from requirements.txt pins tensorflow>=2.9",
            "safe",
        ),
        (
            {"requirements.txt": "tensorflow>=2.4,<2.9\n"},
            "deprecated on TF 2.4-2.8 (removed in TF 2.9)",  # every version of the range still ships it
            "target Keras 2 (TF 2.4-2.8), from requirements.txt pins tensorflow<2.9,>=2.4",
            "safe",
        ),
    ],
)
def test_mp501_fix_is_safe_only_where_tf_2_1_to_2_3_is_out_of_the_range(
    tmp_path, capsys, monkeypatch, pins, fate, target, safety
):
    """The message says what the versions of the range do with the experimental API: deprecated on TF 2.4-2.8,
    removed (an ImportError) from TF 2.9."""
    write_files(tmp_path, {".mplint.yaml": "{}\n", "train.py": G1_POLICY, **pins})
    monkeypatch.chdir(tmp_path)
    assert _run(capsys, "--no-cache", "--select", "MP501", ".") == (
        1,
        [("MP501", 1, f"{MP501_HEAD.format(fate=fate)}{MP501_FIX} ({target})", safety)],
    )
    fixed = 'from tensorflow.keras import mixed_precision\n\nmixed_precision.set_global_policy("mixed_float16")\n'
    main(["--no-cache", "--fix", "--select", "MP501", "."])
    assert (tmp_path / "train.py").read_text() == (fixed if safety == "safe" else G1_POLICY)
    main(["--no-cache", "--fix", "--unsafe-fixes", "--select", "MP501", "."])
    assert (tmp_path / "train.py").read_text() == (G1_POLICY if safety is None else fixed)


UNSCALED_TAPE = """\
import tensorflow as tf

tf.keras.mixed_precision.set_global_policy("mixed_float16")
optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())


def step(model, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
"""
MP202_HEAD = (
    "the optimizer is a LossScaleOptimizer, which divides the gradients by the loss scale, but the tape "
    "differentiates the unscaled loss: updates are 32768x too small and training silently stalls; "
    "differentiate optimizer.scale_loss(loss)"
)


@pytest.mark.parametrize("pin, safe", [("tensorflow>=2.16\n", True), ("tensorflow>=2.6\n", False)])
def test_mp202_keras3_scaling_is_safe_only_on_a_keras3_range(tmp_path, capsys, monkeypatch, pin, safe):
    write_files(tmp_path, {".mplint.yaml": "{}\n", "requirements.txt": pin, "train.py": UNSCALED_TAPE})
    monkeypatch.chdir(tmp_path)
    message = MP202_HEAD if safe else f"{MP202_HEAD} ({BOTH})"
    assert _run(capsys, "--no-cache", "--select", "MP202", ".") == (
        1,
        [("MP202", 10, message, "safe" if safe else "unsafe")],
    )
    main(["--no-cache", "--fix", "--select", "MP202", "."])
    assert (tmp_path / "train.py").read_text() == (
        UNSCALED_TAPE.replace(
            "        loss = tf.reduce_mean(tf.square(model(x) - y))\n    grads = tape.gradient(loss, ",
            "        loss = tf.reduce_mean(tf.square(model(x) - y))\n        scaled_loss = optimizer.scale_loss(loss)\n"
            "    grads = tape.gradient(scaled_loss, ",
        )
        if safe
        else UNSCALED_TAPE
    )


EARLY_EXITS = """\
import torch
from packaging import version


def make_scaler():
    if version.parse(torch.__version__) >= version.parse("2.4.0"):
        return torch.amp.GradScaler("cuda")
    return torch.cuda.amp.GradScaler()


def make_new_scaler():
    if version.parse(torch.__version__) < version.parse("2.4.0"):
        raise RuntimeError("torch >= 2.4 required")
    return torch.cuda.amp.GradScaler()


def decorate_all(functions):
    for function in functions:
        if not hasattr(torch.amp, "custom_fwd"):
            continue
        if function is None:
            return
        yield torch.cuda.amp.custom_fwd(function)
"""


def test_code_past_an_early_exit_runs_in_the_false_arm(tmp_path, capsys):
    """Past ``if torch >= 2.4: return`` the code runs below 2.4 only: silent. Past ``if torch < 2.4: raise`` and
    ``if not hasattr(torch.amp, "custom_fwd"): continue`` it runs from 2.4 on: findings, never rewritten (a version
    test guards the code); ``if function is None: return`` says nothing of versions."""
    write_files(tmp_path, {".mplint.yaml": "{}\n", "requirements.txt": "torch>=2.0\n", "train.py": EARLY_EXITS})
    code, found = _run(capsys, "--no-cache", "--select", "MPT502", str(tmp_path))
    guarded = "(target torch >= 2.0, from requirements.txt pins torch>=2.0); no automatic fix: a version test guards this code"
    assert (code, found) == (
        1,
        [
            (
                "MPT502",
                14,
                f"`torch.cuda.amp.GradScaler` is deprecated since torch 2.4 (FutureWarning): write "
                f'`torch.amp.GradScaler("cuda")` {guarded}',
                None,
            ),
            (
                "MPT502",
                23,
                f"`torch.cuda.amp.custom_fwd` is deprecated since torch 2.4 (FutureWarning): write "
                f"`torch.amp.custom_fwd` {guarded}",
                None,
            ),
        ],
    )
    main(["--no-cache", "--fix", "--unsafe-fixes", "--select", "MPT502", str(tmp_path)])
    assert (tmp_path / "train.py").read_text() == EARLY_EXITS


def test_try_imports_lists_what_a_try_body_imports():
    """One reader of a ``try`` body's imports for both the torch and the Keras tables: absolute ``from`` imports and
    dotted ``import`` statements; relative and star imports, and imports inside a nested block, are not read."""
    import libcst as cst

    from mplint.analysis.version_guards import try_imports

    node = cst.parse_statement(
        "try:\n    from torch.amp import GradScaler, autocast as ac\n    import tensorflow.keras.mixed_precision.experimental\n"
        "    import torch\n    from .amp import custom_fwd\n    from torch.amp import *\n    x = 1; from keras.optimizers import LossScaleOptimizer\n"
        "    if ok:\n        from torch.amp import custom_bwd\nexcept ImportError:\n    pass\n"
    )
    assert list(try_imports(node)) == [
        ("torch.amp", "GradScaler"),
        ("torch.amp", "autocast"),
        ("tensorflow.keras.mixed_precision", "experimental"),
        ("keras.optimizers", "LossScaleOptimizer"),
    ]


# -- what a README documents: for a folder whose pins say nothing -------------------------------------------

STACK_README = """\
# ResNet

The model has been tested using the following stack:
- NVIDIA Docker 2.5.0-1 + Docker 19.03.13
- docker image tensorflow/tensorflow:2.4.0-gpu
"""


def test_an_image_the_readme_documents_is_the_target_and_keras2_code_is_left_alone(tmp_path, capsys):
    write_files(tmp_path, {".mplint.yaml": "{}\n", "bench/README.md": STACK_README, "bench/tf2/train.py": KERAS2_LOOP})
    assert _facts(capsys, tmp_path) == [
        "target: Keras 2 (TF 2.4) (tensorflow/tensorflow:2.4.0-gpu in bench/README.md: TF 2.4)"
    ]
    assert _run(capsys, "--no-cache", "--select", "MP502", str(tmp_path)) == (0, [])


@pytest.mark.parametrize(
    "readme, evidence",
    [
        ("Install:\n\n```bash\npip install tensorflow==2.16.1 numpy\n```\n", "pip install tensorflow==2.16.1"),
        ('Run `python3 -m pip install -U "tensorflow>=2.16"` first.\n', "python3 -m pip install tensorflow>=2.16"),
        ("Use the container `tensorflow/tensorflow:2.16.1-gpu`.\n", "tensorflow/tensorflow:2.16.1-gpu"),
    ],
)
def test_a_keras3_install_the_readme_documents_makes_the_mp502_fix_safe(tmp_path, capsys, readme, evidence):
    write_files(tmp_path, {".mplint.yaml": "{}\n", "README.md": readme, "train.py": KERAS2_LOOP})
    code, found = _run(capsys, "--no-cache", "--select", "MP502", str(tmp_path))
    assert (code, [(rule, line, safety) for rule, line, _, safety in found]) == (1, [("MP502", 7, "safe")])
    assert f"from {evidence} in README.md: TF " in found[0][2]


def test_documented_alternatives_span_one_range_and_unversioned_mentions_say_nothing(tmp_path, capsys):
    readme = (
        "Tested on `tensorflow/tensorflow:1.15.2-gpu` and `tensorflow/tensorflow:2.4.0-gpu`.\n"
        "Also works with `pip install tensorflow` and tensorflow/tensorflow:latest-gpu.\n"
    )
    write_files(tmp_path, {".mplint.yaml": "{}\n", "README.md": readme, "train.py": KERAS2_LOOP})
    evidence = "tensorflow/tensorflow:1.15.2-gpu and tensorflow/tensorflow:2.4.0-gpu in README.md: TF 1.15-2.4"
    assert _facts(capsys, tmp_path) == [f"target: G0 (TF1) or G1 (TF 2.1-2.3) or Keras 2 (TF 1.15-2.4) ({evidence})"]


def test_a_pin_beats_the_readme_of_the_same_folder(tmp_path, capsys):
    write_files(
        tmp_path,
        {
            ".mplint.yaml": "{}\n",
            "README.md": STACK_README,
            "requirements.txt": "tensorflow>=2.16\n",
            "train.py": KERAS2_LOOP,
        },
    )
    assert _facts(capsys, tmp_path) == ["target: Keras 3 (TF >= 2.16) (requirements.txt pins tensorflow>=2.16)"]


def test_a_readme_names_the_torch_of_a_folder_without_torch_pins(tmp_path, capsys):
    readme = "Build with\n\n    docker pull nvcr.io/nvidia/pytorch:20.02-py3\n    pip install -r requirements.txt\n"
    write_files(
        tmp_path, {".mplint.yaml": "{}\n", "README.md": readme, "requirements.txt": "numpy\n", "train.py": TORCH_LOOP}
    )
    assert _facts(capsys, tmp_path)[-1] == (
        "torch: torch 1.4.0a0 (nvcr.io/nvidia/pytorch:20.02-py3 in README.md: torch 1.4.0a0)"
    )
    assert _run(capsys, "--no-cache", "--select", "MPT502", str(tmp_path)) == (0, [])  # deprecated from 2.4 only


def test_a_readme_changed_between_two_cached_runs_is_read_again(tmp_path, capsys):
    write_files(tmp_path, {".mplint.yaml": "{}\n", "README.md": STACK_README, "train.py": KERAS2_LOOP})
    assert _run(capsys, "--select", "MP502", str(tmp_path)) == (0, [])
    (tmp_path / "README.md").write_text("pip install tensorflow==2.16.1\n")
    code, found = _run(capsys, "--select", "MP502", str(tmp_path))
    assert (code, [(rule, safety) for rule, _, _, safety in found]) == (1, [("MP502", "safe")])


def test_conda_pytorch_is_torch(tmp_path, capsys):
    write_files(
        tmp_path,
        {
            ".mplint.yaml": "{}\n",
            "train.py": TORCH_LOOP,
            "environment.yml": "dependencies:\n  - python=3.9\n  - pytorch=1.10\n  - cudatoolkit=11.3\n",
        },
    )
    assert _facts(capsys, tmp_path)[-1] == "torch: torch 1.10 (environment.yml pins torch==1.10.*)"


def test_torch_evidence_names_the_pin_file_by_its_place_in_the_repository(tmp_path, capsys):
    (tmp_path / ".git").mkdir()
    write_files(
        tmp_path,
        {"training/domino/core/requirements.txt": "torch\napex\n", "training/domino/core/layers.py": TORCH_LOOP},
    )
    code, found = _run(capsys, "--no-cache", "--select", "MPT502", str(tmp_path))
    assert (code, found) == (
        1,
        [
            (
                "MPT502",
                6,
                (
                    '`torch.cuda.amp.autocast` is deprecated since torch 2.4 (FutureWarning): write `torch.autocast("cuda")` '
                    "(target torch >= 1.6, from training/domino/core/requirements.txt names torch with no version); no automatic "
                    "fix: `torch.autocast` exists from torch 1.10 only, and the range admits older torch (pin torch >= 1.10, or "
                    "set `torch` in the config, for the fix)"
                ),
                None,
            )
        ],
    )


FAIRSEQ_STYLE_SETUP = """\
import sys
from setuptools import setup


def do_setup(package_data):
    setup(
        name="trainer",
        install_requires=["numpy>=1.21.3", "torch>=1.13"],
        extras_require={"dev": ["pytest"]},
    )


if __name__ == "__main__":
    try:
        do_setup({})
    finally:
        sys.stdout.flush()
"""


def test_a_setup_call_inside_the_scripts_own_function_pins_torch(tmp_path, capsys):
    # A build-system-only pyproject.toml beside it pins nothing for the program's runtime.
    files = {
        ".mplint.yaml": "{}\n",
        "train.py": TORCH_LOOP,
        "setup.py": FAIRSEQ_STYLE_SETUP,
        "pyproject.toml": '[build-system]\nrequires = ["setuptools", "torch>=1.10"]\n',
    }
    write_files(tmp_path, files)
    assert _facts(capsys, tmp_path)[-1] == "torch: torch >= 1.13 (setup.py pins torch>=1.13)"


def test_a_development_extra_bounds_no_framework_range(tmp_path, capsys):
    # horovod's setup.py: torch named in the user-facing extras, and pinned to an old release in its `dev` extra
    setup_py = (
        "from setuptools import setup\n"
        'setup(name="x", extras_require={"pytorch": ["torch"], "all": ["torch"], "dev": ["torch==1.4.0"]})\n'
    )
    write_files(tmp_path, {".mplint.yaml": "{}\n", "setup.py": setup_py, "train.py": TORCH_LOOP})
    assert _facts(capsys, tmp_path)[-1] == "torch: torch >= 1.6 (setup.py names torch with no version)"
