"""The target range in the layouts real repositories have: container monorepos, sub-packages installed into a parent's
image, runtime modules named setup.py, and the code's own version evidence; each with the findings it decides."""

from __future__ import annotations

from conftest import lint_json, target_lines, write_files

from mplint.cli import main

KERAS2_SCALING = """\
import tensorflow as tf

optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())


def step(tape, loss, variables):
    grads = tape.gradient(optimizer.get_scaled_loss(loss), variables)
    optimizer.apply_gradients(zip(optimizer.get_unscaled_gradients(grads), variables))
"""

EXPERIMENTAL = """\
import tensorflow as tf

policy = tf.keras.mixed_precision.experimental.Policy("mixed_float16")
tf.keras.mixed_precision.experimental.set_policy(policy)
"""

CUDA_AMP = """\
import torch

model = torch.nn.Linear(8, 8).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.cuda.amp.GradScaler()
for _ in range(3):
    with torch.cuda.amp.autocast():
        loss = model(torch.randn(4, 8).cuda()).sum()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
"""

APEX = """\
import torch
from apex import amp

model = torch.nn.Linear(8, 8).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
for _ in range(3):
    loss = model(torch.randn(4, 8).cuda()).sum()
    with amp.scale_loss(loss, optimizer) as scaled_loss:
        scaled_loss.backward()
    optimizer.step()
"""


def rules(found: list[tuple]) -> list[tuple]:
    return [(rule, line) for rule, line, _, _ in found]


def test_a_tf1_image_beside_a_looser_pin_is_tf1(tmp_path, capsys):
    # Evidence is intersected: `tensorflow>=1.11.0` admits TF 2, the image beside it holds TF 1.15 only.
    write_files(
        tmp_path,
        {
            ".mplint.yaml": "{}\n",
            "Dockerfile": "ARG FROM_IMAGE_NAME=nvcr.io/nvidia/tensorflow:20.06-tf1-py3\nFROM ${FROM_IMAGE_NAME}\n",
            "requirements.txt": "tensorflow>=1.11.0\n",
            "train.py": KERAS2_SCALING,
        },
    )
    assert target_lines(capsys, tmp_path) == [
        "target: G0 (TF1) (TF 1.15) (requirements.txt pins tensorflow>=1.11.0 and "
        "nvcr.io/nvidia/tensorflow:20.06-tf1-py3 in Dockerfile: TF 1.15)"
    ]
    assert lint_json(capsys, "--no-cache", "--select", "MP502", str(tmp_path)) == (0, [])


def test_an_image_and_a_pin_that_contradict_each_other_leave_the_image(tmp_path, capsys):
    write_files(
        tmp_path,
        {
            ".mplint.yaml": "{}\n",
            "Dockerfile": "FROM tensorflow/tensorflow:2.8.0-gpu\n",
            "requirements.txt": "tensorflow>=2.16\n",  # the image is what runs
            "train.py": KERAS2_SCALING,
        },
    )
    assert target_lines(capsys, tmp_path) == [
        "target: Keras 2 (TF 2.8) (tensorflow/tensorflow:2.8.0-gpu in Dockerfile: TF 2.8)"
    ]


def test_a_dockerfile_in_a_docker_folder_that_pip_installs_tensorflow_over_its_base(tmp_path, capsys):
    dockerfile = (
        "FROM ubuntu:18.04 as base\n"
        "ARG TF_PACKAGE=tf-nightly-gpu\n"
        "ARG TF_PACKAGE_VERSION=2.3.0.dev20200620\n"
        'RUN ["/bin/bash", "-c", "python3 -m pip install --no-cache-dir \\\n'
        "        ${TF_PACKAGE}${TF_PACKAGE_VERSION:+==${TF_PACKAGE_VERSION}} \\\n"
        '        tensorflow-model-optimization==0.3.0"]\n'
    )
    write_files(
        tmp_path,
        {".git/HEAD": "", "impl/docker/Dockerfile": dockerfile, "impl/train.py": EXPERIMENTAL + KERAS2_SCALING},
    )
    assert target_lines(capsys, tmp_path) == [
        "target: G1 (TF 2.1-2.3) (TF 2.3) (pip install tf-nightly-gpu==2.3.0.dev20200620 over ubuntu:18.04 in "
        "impl/docker/Dockerfile: TF 2.3)"
    ]
    # TF 2.3: the experimental API is the right one, and Keras 3's spellings do not exist
    assert lint_json(capsys, "--no-cache", "--select", "MP501,MP502", str(tmp_path)) == (0, [])


def test_a_published_librarys_docker_folder_is_a_development_image_not_its_range(tmp_path, capsys):
    # detectron2's layout: setup.py packages the library for any torch it admits; docker/ is one image to try it in
    write_files(
        tmp_path,
        {
            ".git/HEAD": "",
            "setup.py": 'from setuptools import setup\n\nsetup(name="lib", install_requires=["numpy"])\n',
            "docker/Dockerfile": "FROM nvidia/cuda:11.1.1-cudnn8-devel-ubuntu18.04\nRUN pip install torch==1.10\n",
            "train.py": CUDA_AMP,
        },
    )
    assert target_lines(capsys, tmp_path)[-1:] == ["torch: any torch >= 1.6 (no torch pin)"]
    # the same layout without a packaging script is an application, and docker/ is where it runs
    (tmp_path / "setup.py").unlink()
    assert target_lines(capsys, tmp_path)[-1:] == [
        "torch: torch 1.10 (pip install torch==1.10 over nvidia/cuda:11.1.1-cudnn8-devel-ubuntu18.04 in "
        "docker/Dockerfile: torch 1.10)"
    ]


def test_a_runtime_module_named_setup_py_is_no_project_boundary(tmp_path, capsys):
    # utils/setup.py configures an experiment; it packages nothing, so the pins of the repository apply to utils/
    write_files(
        tmp_path,
        {
            ".git/HEAD": "",
            "requirements.txt": "torch==2.0.0\n",
            "utils/setup.py": "import torch\n\n\ndef setup(config):\n    torch.manual_seed(config.seed)\n",
            "utils/train.py": CUDA_AMP,
        },
    )
    assert target_lines(capsys, tmp_path)[-1:] == ["torch: torch 2.0 (requirements.txt pins torch==2.0.0)"]
    assert lint_json(capsys, "--no-cache", "--select", "MPT502", str(tmp_path)) == (0, [])  # deprecated from 2.4
    # a packaging setup.py is a boundary: the sub-project pins nothing, so any torch may run it
    (tmp_path / "utils/setup.py").write_text('from setuptools import setup\n\nsetup(name="utils")\n')
    code, found = lint_json(capsys, "--no-cache", "--select", "MPT502", str(tmp_path))
    assert (code, rules(found)) == (1, [("MPT502", 5), ("MPT502", 7)])


def test_a_sub_package_installed_by_its_parents_dockerfile_runs_in_that_image(tmp_path, capsys):
    write_files(
        tmp_path,
        {
            ".git/HEAD": "",
            "Dockerfile": (
                "ARG FROM_IMAGE_NAME=nvcr.io/nvidia/pytorch:22.11-py3\nFROM ${FROM_IMAGE_NAME}\n"
                "COPY dlrm /workspace/dlrm\nRUN pip install --no-cache-dir -e /workspace/dlrm\n"
            ),
            "dlrm/setup.py": 'from setuptools import setup\n\nsetup(name="dlrm", install_requires=["numpy"])\n',
            "dlrm/train.py": CUDA_AMP,
        },
    )
    assert target_lines(capsys, tmp_path)[-1:] == [
        "torch: torch 1.13.0a0 (nvcr.io/nvidia/pytorch:22.11-py3 (installing dlrm/) in Dockerfile: torch 1.13.0a0)"
    ]
    assert lint_json(capsys, "--no-cache", "--select", "MPT502", str(tmp_path)) == (0, [])


def test_the_codes_own_version_imports_bound_the_range_of_every_program_that_reaches_them(tmp_path, capsys):
    # utils.py imports torch._six (gone in torch 2.0), and main.py imports utils: main runs on torch < 2.0 only,
    # where the torch.cuda.amp spellings are not deprecated yet
    write_files(
        tmp_path,
        {
            ".git/HEAD": "",
            "utils.py": "from torch._six import inf\n\n\ndef norm(x):\n    return inf\n",
            "main.py": "import utils\n" + CUDA_AMP,
        },
    )
    assert target_lines(capsys, tmp_path)[-1:] == [
        "torch: torch <= 1.13 (utils.py:1 uses torch._six, which torch 2.0 removed)"
    ]
    assert lint_json(capsys, "--no-cache", "--select", "MPT502", str(tmp_path)) == (0, [])
    # a compatibility import says nothing of the version
    (tmp_path / "utils.py").write_text(
        "try:\n    from torch._six import inf\nexcept ImportError:\n    from torch import inf\n"
    )
    code, found = lint_json(capsys, "--no-cache", "--select", "MPT502", str(tmp_path))
    assert (code, rules(found)) == (1, [("MPT502", 6), ("MPT502", 8)])


def test_tf_contrib_beside_a_tf_pin_that_admits_tf2_is_tf1(tmp_path, capsys):
    write_files(
        tmp_path,
        {
            ".git/HEAD": "",
            "requirements.txt": "tensorflow>=1.11.0\n",
            "model.py": "import tensorflow as tf\n\n\ndef dense(x):\n    return tf.contrib.layers.fully_connected(x, 8)\n",
            "train.py": "import model\n" + KERAS2_SCALING,
        },
    )
    assert target_lines(capsys, tmp_path) == [
        "target: G0 (TF1) (TF 1.11-1.15) (requirements.txt pins tensorflow>=1.11.0 and model.py:5 uses tf.contrib, "
        "which TF 2.0 removed: TF 1.11-1.15)"
    ]


def test_a_package_that_sets_tf_use_legacy_keras_itself_is_keras2_for_its_library_code(tmp_path, capsys):
    train_step = (
        "import tensorflow as tf\n\n\n"
        "class Trainer(tf.keras.Model):\n"
        "    def train_step(self, data):\n"
        "        x, y = data\n"
        "        with tf.GradientTape() as tape:\n"
        "            loss = self.compiled_loss(y, self(x))\n"
        "            scaled = self.optimizer.get_scaled_loss(loss)\n"
        "        grads = self.optimizer.get_unscaled_gradients(tape.gradient(scaled, self.trainable_variables))\n"
        "        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))\n"
    )
    write_files(
        tmp_path,
        {
            "pyproject.toml": '[project]\nname = "trainers"\ndependencies = ["tensorflow>=2.16"]\n',
            "trainers/__init__.py": 'import os\n\nos.environ["TF_USE_LEGACY_KERAS"] = "1"\n',
            "trainers/model.py": train_step,
        },
    )
    assert lint_json(capsys, "--no-cache", "--select", "MP502", str(tmp_path)) == (0, [])


def test_an_unrelated_package_of_a_monorepo_does_not_decide_the_keras_of_another(tmp_path, capsys):
    write_files(
        tmp_path,
        {
            ".git/HEAD": "",
            "vendor/tvm/__init__.py": "",
            "vendor/tvm/frontend.py": "import keras\n",  # a vendored compiler's Keras frontend
            "bert/common/model_utils.py": KERAS2_SCALING,
        },
    )
    code, found = lint_json(capsys, "--no-cache", "--select", "MP502", str(tmp_path))
    assert code == 1 and {(rule, line) for rule, line, _, _ in found} == {("MP502", 7), ("MP502", 8)}
    assert all(
        "target G1 (TF 2.1-2.3) or Keras 2 or Keras 3 (TF >= 2.1), from no pin, config or Keras import" in message
        for _, _, message, _ in found
    )


def test_apex_amp_in_an_image_dated_before_apex_deprecated_it_is_its_documented_api(tmp_path, capsys):
    files = {".git/HEAD": "", "Dockerfile": "FROM nvcr.io/nvidia/pytorch:20.11-py3\n", "train.py": APEX}
    write_files(tmp_path, files)
    assert lint_json(capsys, "--no-cache", "--select", "MPT501", str(tmp_path)) == (0, [])
    (tmp_path / "Dockerfile").write_text("FROM nvcr.io/nvidia/pytorch:23.05-py3\n")  # after October 2022
    code, found = lint_json(capsys, "--no-cache", "--select", "MPT501", str(tmp_path))
    assert (code, rules(found)) == (1, [("MPT501", 6)])


CPU_AMP = """\
import torch

model = torch.nn.Linear(8, 8)
with torch.cpu.amp.autocast():
    print(model(torch.randn(4, 8)))
"""

LAUNCHER = """\
#!/bin/bash
MODEL_SCRIPT=${MODEL_DIR}/models/recommendation/pytorch/memrec/product/memrec.py
python -u ${MODEL_SCRIPT} --ipex "$@"
"""


def test_code_with_no_pins_runs_where_the_script_that_launches_it_installs(tmp_path, capsys):
    # The code's tree states nothing; quickstart/'s run.sh runs it, beside the requirements its README installs.
    write_files(
        tmp_path,
        {
            ".git/HEAD": "",
            "models/recommendation/pytorch/memrec/product/memrec.py": CPU_AMP,
            "quickstart/recommendation/pytorch/memrec/requirements.txt": "torch==2.0.1\n",
            "quickstart/recommendation/pytorch/memrec/inference/cpu/run.sh": LAUNCHER,
            "models/vision/pytorch/resnet/train.py": CPU_AMP,  # launched by nothing: every torch
            "quickstart/vision/pytorch/resnet/requirements.txt": "torch==2.0.1\n",
            "quickstart/vision/pytorch/resnet/run.sh": "python train.py\n",  # a bare name: its own folder
        },
    )
    torch_lines = [line for line in target_lines(capsys, tmp_path) if line.startswith("torch:")]
    assert torch_lines == [
        "torch: torch 2.0 (quickstart/recommendation/pytorch/memrec/requirements.txt pins torch==2.0.1)",
        "torch: any torch >= 1.6 (no torch pin)",
    ]
    code, found = lint_json(capsys, "--no-cache", "--select", "MPT502", str(tmp_path))
    # torch 2.0 does not deprecate torch.cpu.amp.autocast: only resnet/train.py, which may run on torch >= 2.4
    assert (code, [(rule, line) for rule, line, _, _ in found]) == (1, [("MPT502", 4)])
    assert "(target any torch >= 1.6: no torch pin)" in found[0][2]


def test_an_ngc_tag_on_a_registry_with_a_port_is_that_ngc_release(tmp_path, capsys):
    # An internal mirror of NGC (registry with a port, a `-stage` suffix): still the 21.05 release, torch 1.9.
    write_files(
        tmp_path,
        {
            ".git/HEAD": "",
            "bert/Dockerfile": "FROM gitlab-master.nvidia.com:5005/dl/dgx/pytorch:21.05-py3-stage\nWORKDIR /workspace\n",
            "bert/train.py": CUDA_AMP,
        },
    )
    torch_lines = [line for line in target_lines(capsys, tmp_path) if line.startswith("torch:")]
    assert torch_lines == [
        "torch: torch 1.8.0a0-1.9.0a0 (gitlab-master.nvidia.com:5005/dl/dgx/pytorch:21.05-py3-stage in bert/Dockerfile: "
        "torch 1.8.0a0-1.9.0a0)"
    ]
    assert lint_json(capsys, "--no-cache", "--select", "MPT502", str(tmp_path)) == (0, [])


MLPERF_TF = """\
import tensorflow as tf


def wrap(optimizer):
    return tf.keras.mixed_precision.experimental.LossScaleOptimizer(optimizer, "dynamic")


wrap(tf.keras.optimizers.SGD())
"""


def test_a_benchmark_submissions_system_descriptions_name_its_framework(tmp_path, capsys):
    # MLCommons' layout: <submitter>/systems/*.json says what each system ran; the code's folders say nothing.
    write_files(
        tmp_path,
        {
            ".git/HEAD": "",
            "Acme/systems/node-a.json": '{"submitter": "Acme", "framework": "TensorFlow 2.2.2"}',
            "Acme/systems/node-b.json": '{"framework": "TensorFlow 2.2.0, Acme SDK 0.14"}',
            "Acme/benchmarks/resnet/implementations/tf/train.py": MLPERF_TF,
            "Other/systems/dgx.json": '{"framework": "PyTorch NVIDIA Release 21.05"}',
            "Other/benchmarks/bert/implementations/pytorch/train.py": CUDA_AMP,
        },
    )
    lines = target_lines(capsys, tmp_path)
    assert lines[0] == (
        'target: G1 (TF 2.1-2.3) (TF 2.2) ("TensorFlow 2.2.2" and "TensorFlow 2.2.0, Acme SDK 0.14" in '
        "Acme/systems/*.json: TF 2.2)"
    )
    assert lines[-1] == (
        'torch: torch 1.8.0a0-1.9.0a0 ("PyTorch NVIDIA Release 21.05" in Other/systems/*.json: torch 1.8.0a0-1.9.0a0)'
    )
    # TF 2.2: the experimental API is the right one; torch 1.9: torch.cuda.amp is not deprecated
    assert lint_json(capsys, "--no-cache", "--select", "MP501,MPT502", str(tmp_path)) == (0, [])


def test_a_sub_project_whose_pins_name_no_framework_takes_the_submissions_systems(tmp_path, capsys):
    # Samsung's layout: the implementation folder is a project of its own (its requirements.txt pins h5py and
    # boto3), and only <submitter>/systems/*.json, four folders above, names the framework it ran on
    write_files(
        tmp_path,
        {
            ".git/HEAD": "",
            "Acme/systems/node-a.json": '{"framework": "TensorFlow 2.2.2"}',
            "Acme/benchmarks/resnet/implementations/tf/requirements.txt": "h5py==2.10.0\n",
            "Acme/benchmarks/resnet/implementations/tf/train.py": MLPERF_TF,
            "Other/systems/dgx.json": '{"framework": "PyTorch NVIDIA Release 21.05"}',
            "Other/benchmarks/bert/implementations/pytorch/requirements.txt": "boto3==1.14.0\n",
            "Other/benchmarks/bert/implementations/pytorch/train.py": CUDA_AMP,
        },
    )
    assert lint_json(capsys, "--no-cache", "--select", "MP501,MPT502", str(tmp_path)) == (0, [])
    capsys.readouterr()
    main(["--show-facts", str(tmp_path / "Acme/benchmarks/resnet/implementations/tf/train.py")])
    assert 'target: G1 (TF 2.1-2.3) (TF 2.2) ("TensorFlow 2.2.2" in ../../../../systems/*.json: TF 2.2)' in (
        capsys.readouterr().out
    )
    main(["--show-facts", str(tmp_path / "Other/benchmarks/bert/implementations/pytorch/train.py")])
    assert (
        'torch: torch 1.8.0a0-1.9.0a0 ("PyTorch NVIDIA Release 21.05" in Other/systems/*.json: torch 1.8.0a0-1.9.0a0)'
        in capsys.readouterr().out
    )


TF1_SESSION = """\
import tensorflow as tf

policy = tf.keras.mixed_precision.experimental.Policy("mixed_float16")
tf.keras.mixed_precision.experimental.set_policy(policy)
x = tf.placeholder(tf.float32, [None, 4])
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
"""


def test_a_program_that_builds_a_tf1_session_runs_on_tf1(tmp_path, capsys):
    # no pin: tf.placeholder and tf.Session exist only in TF 1, where the experimental API is the only one
    write_files(tmp_path, {".git/HEAD": "", "tutorials/amp_tf1.py": TF1_SESSION})
    assert target_lines(capsys, tmp_path) == [
        "target: G0 (TF1) (TF 1.0-1.15) (tutorials/amp_tf1.py:5 uses tf.placeholder, which TF 2.0 removed: TF 1.0-1.15)"
    ]
    assert lint_json(capsys, "--no-cache", "--select", "MP501", str(tmp_path)) == (0, [])


def test_dockerfile_args_a_compose_file_sets_are_not_their_defaults(tmp_path, capsys):
    # horovod's layout: the test Dockerfile's ARG defaults name torch 1.2, but every Compose service that builds it
    # sets PYTORCH_PACKAGE (torch 2.0 and nightly): the default is not what runs, and says nothing of the range
    dockerfile = (
        "ARG UBUNTU_VERSION=20.04\nFROM ubuntu:${UBUNTU_VERSION}\nARG PYTORCH_PACKAGE=torch==1.2.0+cpu\n"
        "RUN pip install ${PYTORCH_PACKAGE}\n"
    )
    compose = (
        "services:\n  test-cpu-base:\n    build:\n      context: .\n      dockerfile: Dockerfile.test.cpu\n"
        "      args:\n        PYTORCH_PACKAGE: torch==2.0.0+cpu\n"
    )
    files = {".git/HEAD": "", "Dockerfile.test.cpu": dockerfile, "examples/train.py": CUDA_AMP}
    write_files(tmp_path, files)
    assert target_lines(capsys, tmp_path)[-1] == (
        "torch: torch 1.2.0+cpu (pip install torch==1.2.0+cpu over ubuntu:20.04 in Dockerfile.test.cpu: torch 1.2.0+cpu)"
    )
    (tmp_path / "docker-compose.test.yml").write_text(compose)
    assert target_lines(capsys, tmp_path)[-1] == "torch: any torch >= 1.6 (no torch pin)"
