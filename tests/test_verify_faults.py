"""``mplint verify`` on scripts that hang, train nothing in any process, or run out of memory:
each is "could not verify" with exit status 2, never a pass, and nothing is left running."""

import os
import re
import resource
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

from mplint.verify import runner  # noqa: E402
from mplint.verify.cli import main  # noqa: E402

pytestmark = pytest.mark.tensorflow
FAULTS = Path(__file__).resolve().parent.parent / "fixtures" / "verify" / "faults"


def verify(capsys, *argv):
    code = main([*map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a killed process not yet reaped by its new parent is not running either
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1] != "Z"
    except OSError:
        return False


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _helper_pid(stderr: str) -> int:
    return int(re.search(r"^helper pid (\d+)$", stderr, re.M)[1])


def test_hanging_script_times_out_and_its_whole_process_tree_is_killed(capsys):
    start = time.monotonic()
    code, out = verify(capsys, FAULTS / "hangs.py", "--timeout", "6")
    elapsed = time.monotonic() - start
    assert code == 2
    assert "could not verify hangs.py: the run run timeout: no result after 6 s (--timeout)" in out
    assert "verified" not in out.replace("could not verify", "")
    assert elapsed < 20, f"verify took {elapsed:.1f} s with --timeout 6"
    helper = _helper_pid(out)  # from the stderr tail
    try:
        assert _gone_within(helper, 5), f"the script's child {helper} survived the timeout"
    finally:
        if _alive(helper):
            os.kill(helper, 9)


def test_timeout_kills_a_child_that_holds_the_output_streams_open():
    # without killing the process group, waiting for the streams' end would block for the child's 600 s
    start = time.monotonic()
    result = runner.run_script("run", FAULTS / "hangs.py", [], runner.RunOptions(timeout=4))
    assert result.status == "timeout" and not result.ok
    assert time.monotonic() - start < 15
    assert _gone_within(_helper_pid(result.stderr_tail), 5)


def test_no_training_in_the_script_or_its_subprocess_is_an_error(capsys):
    code, out = verify(capsys, FAULTS / "spawns_untrained_child.py", "--timeout", "60")
    assert code == 2
    assert "could not verify spawns_untrained_child.py: the run run nothing-recorded" in out
    assert "no Keras model or torch module was called and no optimizer step ran" in out


def test_running_out_of_memory_under_memory_limit_is_an_error(capsys):
    code, out = verify(capsys, FAULTS / "exhausts_memory.py", "--memory-limit", "3000", "--timeout", "60")
    assert code == 2
    assert (
        "could not verify exhausts_memory.py: the run run out-of-memory: ran out of memory under "
        "--memory-limit 3000 MB" in out
    )
    assert "MemoryError" in out  # the stderr tail


def test_memory_limit_is_applied_to_the_script_only(tmp_path):
    script = tmp_path / "limit.py"
    script.write_text("import resource, sys\nprint(resource.getrlimit(resource.RLIMIT_AS)[0], file=sys.stderr)\n")
    before = resource.getrlimit(resource.RLIMIT_AS)
    result = runner.run_script("run", script, [], runner.RunOptions(timeout=60, memory_limit_mb=2500))
    assert result.status == "nothing-recorded"
    assert int(result.stderr_tail) == 2500 * 1024 * 1024
    assert resource.getrlimit(resource.RLIMIT_AS) == before  # the verifying process is not capped


def test_without_memory_limit_the_memory_fixture_refuses_to_allocate(capsys):
    # the guard that keeps the out-of-memory fixture safe when no limit reaches it
    if resource.getrlimit(resource.RLIMIT_AS)[0] != resource.RLIM_INFINITY:
        pytest.skip("this process already runs under an address-space limit")
    code, out = verify(capsys, FAULTS / "exhausts_memory.py", "--timeout", "60")
    assert code == 2
    assert "refusing to run without an address-space limit" in out


@pytest.mark.parametrize("option", [["--memory-limit", "0"], ["--timeout", "0"]])
def test_nonsensical_limits_are_usage_errors(capsys, option):
    code, out = verify(capsys, FAULTS / "hangs.py", *option)
    assert code == 2
    assert "must be" in out


def test_a_script_in_the_folder_that_holds_verify_s_scratch_is_copied_without_it(tmp_path, monkeypatch):
    # `mplint verify /tmp/train.py`: the scratch copy of /tmp lies in /tmp; copying it into itself never ended
    (tmp_path / "data.txt").write_text("data")
    script = tmp_path / "train.py"
    script.write_text("import os, sys\nprint(sorted(os.listdir('.')), file=sys.stderr)\n")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result = runner.run_script("run", script, [], runner.RunOptions(timeout=60, warm=False))
    assert result.status == "nothing-recorded", result.detail
    assert "['data.txt', 'train.py']" in result.stderr_tail
