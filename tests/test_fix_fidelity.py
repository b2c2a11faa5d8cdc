"""A fix changes the flagged code and nothing else: every other byte (line endings of every kind, form feeds,
tabs, trailing blanks, a missing final newline) survives as it was, through the CLI's write too."""

from __future__ import annotations

import functools

from fuzz_strategies import Program, options_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mplint.cli import main
from mplint.engine.check import check_source
from mplint.engine.fidelity import keep_untouched, lines

FLAGGED = b'm = keras.Sequential([keras.layers.Dense(3, activation="softmax")])'
FIXED = b'm = keras.Sequential([keras.layers.Dense(3, activation="softmax", dtype="float32")])'
ENDINGS = (b"\n", b"\r\n", b"\r")
OTHERS = (b"x = 1", b"# a comment", b"", b"y = [1,  2]", b"def f():", b"z = 'a\\tb'")


@functools.cache
def options():
    return options_for(Program("fidelity", "import keras\n", policy="mixed_float16"), "import keras\n", fix=True)


def fixed(source: bytes) -> bytes | None:
    return check_source("example.py", source, options()).fixed_source


def test_cr_only_file_keeps_every_cr():
    source = b"import keras\r" + FLAGGED + b"\rx = 1\r"
    assert fixed(source) == b"import keras\r" + FIXED + b"\rx = 1\r"


def test_cr_only_file_whose_last_line_is_fixed_keeps_its_cr():
    assert fixed(b"import keras\r" + FLAGGED + b"\r") == b"import keras\r" + FIXED + b"\r"


def test_form_feed_before_a_fixed_line_and_elsewhere_survives():
    source = b"import keras\n\x0c" + FLAGGED + b"\n\x0c\n\x0cx = 1\n"
    assert fixed(source) == b"import keras\n\x0c" + FIXED + b"\n\x0c\n\x0cx = 1\n"


def test_cli_writes_cr_only_and_form_feed_files_exactly(tmp_path, monkeypatch, capsys):
    (tmp_path / ".mplint.yaml").write_text("policy: mixed_float16\n")
    files = {"cr.py": b"import keras\r" + FLAGGED + b"\rx = 1\r", "ff.py": b"import keras\n\x0c" + FLAGGED + b"\n"}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    monkeypatch.chdir(tmp_path)
    assert main([".", "--fix", "--no-cache"]) == 0
    for name, data in files.items():
        assert (tmp_path / name).read_bytes() == data.replace(FLAGGED, FIXED), name


def test_keep_untouched_takes_untouched_lines_from_the_source():
    # what libcst printed (no form feed, no final CR) against what the file holds
    source, printed = b"a = 1\r\x0cb = 2\rc = 3\r", b"a = 1\rb = 2\rc = 3"
    assert keep_untouched(source, printed, b"a = 1\rb = 22\rc = 3") == b"a = 1\r\x0cb = 22\rc = 3\r"
    assert keep_untouched(source, printed, b"import k\ra = 1\rb = 2\rc = 3") == b"import k\r" + source
    assert keep_untouched(printed, printed, b"anything") == b"anything"
    assert lines(b"a\r\nb\rc\nd") == [b"a\r\n", b"b\r", b"c\n", b"d"]


line_ending = st.sampled_from(ENDINGS)
blank = st.sampled_from((b"", b" ", b"\t", b"\x0c", b"  \t"))


@st.composite
def files(draw) -> bytes:
    """A module with one fixable line among others, every line with its own ending and surrounding blanks."""
    out = [b"import keras" + draw(blank) + draw(line_ending)]
    others = draw(st.lists(st.sampled_from(OTHERS), max_size=5))
    at = draw(st.integers(0, len(others)))
    for text in [*others[:at], FLAGGED, *others[at:]]:
        lead = draw(st.sampled_from((b"", b"\x0c"))) if text else draw(blank)
        out.append(lead + text + draw(blank) + draw(line_ending))
        if text == b"def f():":
            out.append(draw(st.sampled_from((b"    ", b"\t"))) + b"return 1" + draw(line_ending))
    if draw(st.booleans()):  # no final line ending
        out[-1] = out[-1].rstrip(b"\r\n")
    return b"".join(out)


@settings(max_examples=60, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(files())
def test_fix_keeps_every_byte_outside_the_fix(source):
    assert fixed(source) == source.replace(FLAGGED, FIXED)
