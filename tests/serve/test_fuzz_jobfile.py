"""Property-based: whatever a job file holds, reading it gives a JobSpec or one InputError line
naming the file, never another exception. Bounded: a few hundred examples a test, no deadline."""

from __future__ import annotations

import tempfile
from pathlib import Path

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from apportion.core.errors import InputError
from apportion.serve.jobs.jobspec import FIELDS, JobSpec, field_line, load_job_file

FUZZ = settings(max_examples=200, deadline=None)

# characters that make YAML do things: structure, quoting, anchors, tags, numbers
YAML_ALPHABET = st.sampled_from(list(":-[]{},\n #'\"&*!|>%@`?.+_0123456789eE") + ["name", "command", "total_steps",
                                "gpus", "env", ".inf", ".nan", "~", "  ", "1e300", "0x", "!!python/object", "\t"])
NUMBERS = st.sampled_from(["0", "-1", "1e300", "1.0e+300", "2e63", "9223372036854775808", "1_000", "0x10", "1e3",
                           ".inf", "-.inf", ".nan", "1.5", "007", "0o17", "1:30", "9" * 30, "true", "ten"])
TEXT = st.text(max_size=30) | st.sampled_from(["[blink]root[/blink]", "\x1b[2J", "x" * 300, "APPORTION_X", ""])
VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
                      lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
                      max_leaves=6)


def read(text: str) -> JobSpec | InputError:
    """Read ``text`` as a job file: a spec, or one InputError line that names the file."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "job.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        field_line(path, "total_steps")
        try:
            return load_job_file(path)
        except InputError as err:
            assert str(err).startswith(str(path)) and "\n" not in str(err), repr(str(err))
            return err


@FUZZ
@given(text=st.lists(YAML_ALPHABET, max_size=40).map("".join))
def test_any_yaml_like_text_is_a_spec_or_one_error_line(text):
    read(text)


@FUZZ
@given(fields=st.dictionaries(st.sampled_from(FIELDS) | TEXT, VALUES, max_size=6))
def test_any_mapping_of_fields_is_a_spec_or_one_error_line(fields):
    read(yaml.safe_dump({"name": "a", "command": "x", "total_steps": 10, **fields}, allow_unicode=True))


@FUZZ
@given(key=st.sampled_from(["total_steps", "gpus", "priority", "epochs"]), number=NUMBERS)
def test_any_number_is_read_or_refused_saying_what_was_expected(key, number):
    text = f"name: a\ncommand: x\n{key}: {number}\n" + ("steps_per_epoch: 2\n" if key == "epochs" else
                                                       "total_steps: 5\n" if key != "total_steps" else "")
    result = read(text)
    if isinstance(result, InputError):  # says what it wanted, and what it got
        assert result.field == key and "must be a" in result.message and "got " in result.message, str(result)
