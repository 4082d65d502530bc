"""The results store: a JSON-lines file of job records, appended durably by one process.

One line per finished job: a JSON object with at least a string ``key``
(:mod:`.records` has the fields). :class:`ResultsFile` opens the file for
appending -- a regular file: a device or a pipe is refused before it is read
-- under an exclusive advisory lock (``flock``; another sweep writing the
same file fails at once with :class:`~.errors.SweepError`; on a file system
without locks it goes on unlocked), reads the finished records, and
cuts away a damaged tail -- lines that do not parse with nothing valid after
them, which is what a writer killed mid-line leaves; a damaged line followed
by valid ones is an error instead. :meth:`ResultsFile.append` writes one line,
flushes and fsyncs it (and a new file's directory is fsynced once), so a
record on disk survives a crash of the sweep. Only the parent process writes.

More (the detail of this module): ``docs/internals/batch.md``, section ``partitioner.batch.store``.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..core.documents import strict_json_value
from ..problem import ProblemError
from .errors import SweepError

__all__ = ["ResultsFile", "read_results", "latest_records"]


def _parse_lines(data: bytes, source: str) -> tuple[list[dict[str, Any]], int, bool]:
    """Records in ``data``, the length of the valid prefix, and whether it ends without a newline.

    A damaged tail -- lines that do not parse, with nothing valid after them --
    is what a killed writer leaves, and is dropped; a damaged line followed by
    valid ones is not, and raises.
    """
    records: list[dict[str, Any]] = []
    valid_end = 0
    bad_line: int | None = None
    pos = 0
    lineno = 0
    while pos < len(data):
        nl = data.find(b"\n", pos)
        end = len(data) if nl < 0 else nl + 1
        raw = data[pos:end]
        lineno += 1
        pos = end
        if not raw.strip(b" \t\r\n\x00"):
            if bad_line is None:
                valid_end = end if nl >= 0 else valid_end
            continue
        try:
            record = json.loads(raw)
            ok = isinstance(record, dict) and isinstance(record.get("key"), str)
        except (ValueError, UnicodeDecodeError):
            ok = False
        if not ok:
            bad_line = bad_line or lineno
            continue
        if bad_line is not None:
            raise ProblemError(f"line {bad_line} is not a valid result record (and later lines are)", source=source)
        records.append(record)
        valid_end = end
    missing_newline = valid_end > 0 and not data[:valid_end].endswith(b"\n")
    return records, valid_end, missing_newline


def _check_regular(handle: Any, path: Path) -> None:
    """Refuse what is not a regular file: a device or a pipe has no end to read to (``/dev/zero``, ``/dev/full``
    read zeros forever) and cannot be cut back to its last whole record."""
    if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
        raise SweepError("is not a regular file (a results file is read to its end, appended to and resumed: give a "
                         "file path)", source=str(path))


def read_results(path: str | Path) -> list[dict[str, Any]]:
    """Every record of a results file in order; a half-written last line is ignored."""
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            _check_regular(handle, path)
            data = handle.read()
    except FileNotFoundError:
        raise ProblemError("file not found", source=str(path)) from None
    except OSError as err:
        raise ProblemError(f"cannot read file: {err.strerror or err}", source=str(path)) from None
    return _parse_lines(data, str(path))[0]


def latest_records(records: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """The last record of every key (a retried job's new record replaces the old one)."""
    latest: dict[str, Mapping[str, Any]] = {}
    for record in records:
        latest[record["key"]] = record
    return latest


class ResultsFile:
    """The JSON-lines results store, opened for appending by one process at a time.

    Opening it takes an exclusive lock (another sweep writing the same file
    fails at once), reads the finished records and cuts away a half-written
    tail. :meth:`append` writes one line, flushes and fsyncs it.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._failed = ""
        created = not self.path.exists()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a+b")
        except OSError as err:
            raise SweepError(f"cannot open the results file: {err.strerror or err}", source=str(self.path)) from None
        try:
            _check_regular(self._file, self.path)
            _lock(self._file, self.path)
            self._file.seek(0)
            data = self._file.read()
            self.records, valid_end, missing_newline = _parse_lines(data, str(self.path))
            self.dropped_bytes = len(data) - valid_end
            if self.dropped_bytes:
                self._file.truncate(valid_end)
            if missing_newline:
                self._file.write(b"\n")
            self._sync()
            if created:
                _fsync_dir(self.path.parent)
        except BaseException:
            self._file.close()
            raise

    def latest(self) -> dict[str, Mapping[str, Any]]:
        return latest_records(self.records)

    def append(self, record: Mapping[str, Any]) -> None:
        """Write one record as a strict-JSON line and fsync it.

        A write that fails (a full disk, a file-size limit) raises
        :class:`~.errors.SweepError` naming the file, and the store takes no
        further lines: every line before it is intact, and the partial line it
        may have left is the damaged tail the next open (the resume) cuts.
        """
        if self._failed:
            raise SweepError(f"an earlier write failed ({self._failed}); resume the sweep to continue", source=str(self.path))
        line = json.dumps(strict_json_value(record), separators=(",", ":"), allow_nan=False, default=_json_default) + "\n"
        try:
            self._file.write(line.encode())
            self._sync()
        except OSError as err:
            self._failed = err.strerror or str(err)
            raise SweepError(
                f"cannot write a record: {self._failed}; the {len(self.records)} records before it are kept, and "
                "running the sweep again resumes after them",
                source=str(self.path),
            ) from None
        self.records.append(dict(record))

    def _sync(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file.closed:
            return
        try:
            self._file.close()  # closing releases the lock
        except OSError as err:  # flushing the rest of a failed write: the resume cuts that tail
            if not self._failed:
                raise SweepError(f"cannot close the results file: {err.strerror or err}", source=str(self.path)) from None

    def __enter__(self) -> "ResultsFile":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _lock(handle: Any, path: Path) -> None:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no advisory lock, one writer is the user's job
        return
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SweepError("is being written by another running sweep (it holds the file lock)", source=str(path)) from None
    except OSError:  # a file system without locks (some NFS mounts): go on unlocked
        pass


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory handles
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    return str(value)
