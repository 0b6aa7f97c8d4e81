"""A data file's text, gzip or not (told by its first bytes, not its name), UTF-8 with or without a
byte-order mark: one InputError naming the file for whatever cannot be read."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

from apportion.core.errors import InputError


def read_text(source: str) -> str:
    """The text of the file at ``source``."""
    try:
        raw = Path(source).read_bytes()
    except FileNotFoundError:
        raise InputError(source, "no such file") from None
    except OSError as err:
        raise InputError(source, f"cannot read: {err.strerror or err}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as err:
            raise InputError(source, f"not a readable gzip file ({err})") from None
    if raw[257:262] == b"ustar":  # the PAI 2020 tables ship as .tar.gz
        raise InputError(source, f"a tar archive, not a data file: extract it first (tar -xzf {Path(source).name})")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise InputError(source, f"not UTF-8 text (byte {err.start})") from None
