"""A batch job's files: the items of a JSONL input, and the output appended line by line so that
the same command, run again after an interruption, does only what is left.

Each output line is written whole with one ``write`` and flushed; a line cut short (a kill during
the write, a full disk) is the file's last, and the next run cuts it off and does its item again.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import LocalguideError


class JobError(LocalguideError):
    """The job cannot run or go on (its files), as opposed to one item's error."""


@dataclass
class Entry:
    """One input line: its ``id`` (given, or the line's number), the item for ``Model.batch`` (the
    line's fields but ``id``) or why the line is not one."""

    id: object
    line: int
    item: dict | None = None
    error: str | None = None

    @property
    def key(self) -> str:
        return id_key(self.id)


def id_key(value) -> str:
    """An id as the output compares it (1 and "1" differ)."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def read_input(path: Path) -> list[Entry]:
    """The entries of the JSONL file ``path`` (blank lines skipped). Raises ``JobError`` where two
    lines have one id: the output could not tell them apart."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise JobError(f"cannot read {path}: {e.strerror or e}") from None
    entries, seen = [], {}
    for number, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        entry = _entry(raw, number)
        if entry.key in seen:
            raise JobError(f"{path}: lines {seen[entry.key]} and {number} have the same id {entry.key}: "
                           "give each line its own \"id\"")
        seen[entry.key] = number
        entries.append(entry)
    return entries


def _entry(raw: bytes, number: int) -> Entry:
    try:
        value = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        return Entry(number, number, error=f"line {number} is not UTF-8 (byte {e.start})")
    except json.JSONDecodeError as e:
        return Entry(number, number, error=f"line {number} is not JSON: {e.msg} at column {e.colno}")
    if not isinstance(value, dict):
        return Entry(number, number, error=f"line {number} is a JSON {type(value).__name__}, not an object "
                                            "with \"prompt\" or \"messages\"")
    ident = value.pop("id", number)
    if isinstance(ident, bool) or not isinstance(ident, (str, int)):
        return Entry(number, number, error=f"line {number}: \"id\" must be a string or a whole number")
    return Entry(ident, number, item=value)


class Output:
    """The output file, appended line by line (see the module docstring)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.done: set[str] = set()
        self.cut = 0  # bytes of a torn last line cut off
        self._fd = None

    def open(self) -> "Output":
        """Read the ids written before (a torn last line cut off), then open for appending."""
        try:
            data = self.path.read_bytes() if self.path.exists() else b""
        except OSError as e:
            raise JobError(f"cannot read {self.path}: {e.strerror or e}") from None
        good = 0
        lines = data.split(b"\n")
        for i, raw in enumerate(lines):
            last = i == len(lines) - 1
            if not raw.strip():
                if not last:
                    good += len(raw) + 1
                continue
            try:
                value = json.loads(raw.decode("utf-8"))
                if last or not isinstance(value, dict) or "id" not in value:
                    raise ValueError
            except ValueError:
                if not last:  # (a line cut short has no newline: it is the file's last)
                    raise JobError(f"{self.path}: line {i + 1} is not an output line of localguide batch: "
                                   "move the file aside or name another -o") from None
                break  # (a last line cut short: done again)
            self.done.add(id_key(value["id"]))
            good += len(raw) + 1
        try:
            if good < len(data):
                self.cut = len(data) - good
                os.truncate(self.path, good)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as e:
            raise JobError(f"cannot write {self.path}: {e.strerror or e}") from None
        return self

    def write(self, record: dict) -> None:
        """Append ``record`` as one line; where it cannot be written whole, the file is left as it
        was and ``JobError`` says why."""
        line = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
        at = os.lseek(self._fd, 0, os.SEEK_END)
        try:
            written = 0
            while written < len(line):
                written += os.write(self._fd, line[written:])
        except OSError as e:
            try:
                os.ftruncate(self._fd, at)
            except OSError:
                pass
            raise JobError(f"cannot write {self.path}: {e.strerror or e}") from None
        self.done.add(id_key(record["id"]))

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
