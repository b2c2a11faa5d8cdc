"""``mplint verify`` where the quick start's install left TensorFlow out: one line saying what to
install, exit status 2, no traceback. Runs without TensorFlow (it hides it where it is installed)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import REPO

SCRIPT = REPO / "fixtures" / "verify" / "fit_softmax.py"
HIDE_AND_RUN = (
    "import sys\n{hide}\nfrom mplint.cli import main\nsys.exit(main(['verify', {script!r}, '--keras', '{keras}']))"
)


@pytest.mark.parametrize(
    ("hidden", "keras", "named"),
    [
        (("tensorflow", "keras", "numpy"), 3, "numpy, tensorflow, keras are"),
        (("tensorflow",), 3, "tensorflow is"),
        (("tf_keras",), 2, "tf_keras is"),
    ],
)
def test_verify_without_the_runtime_extra_says_what_to_install(hidden, keras, named):
    hide = "\n".join(f"sys.modules[{name!r}] = None" for name in hidden)  # find_spec answers None, import fails
    done = subprocess.run(
        [sys.executable, "-c", HIDE_AND_RUN.format(hide=hide, script=str(SCRIPT), keras=keras)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        (
            f"mplint verify: error: mplint verify runs the script with TensorFlow, and {named} not installed in this "
            "environment: install mplint's runtime extra (python3 -m pip install \".[runtime]\" in mplint's folder)\n"
        ),
    )


def test_verify_of_a_torch_script_without_torch_says_what_to_install():
    script = REPO / "fixtures" / "verify" / "torch_masked_fill.py"
    code = f"import sys\nsys.modules['torch'] = None\nfrom mplint.cli import main\nsys.exit(main(['verify', {str(script)!r}]))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        (
            "mplint verify: error: mplint verify runs this script with PyTorch, and torch is not installed in this "
            "environment: install torch (python3 -m pip install torch; for a CPU-only build add "
            "--index-url https://download.pytorch.org/whl/cpu)\n"
        ),
    )
