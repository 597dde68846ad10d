"""The log file of one dlsched command: MLflow's own messages and tracebacks, out of the terminal.

MLflow and alembic log at length (schema migrations, every retry of a dead server, full
tracebacks of a refused write) to stderr, where they bury dlsched's one-line message. A command
sends those loggers to its log file instead, and turns off MLflow's bar per artifact transfer,
unless ``--verbose``; dlsched's own warnings stay on stderr. A bug's traceback goes to the file,
which its message names; so does the traceback of a refusal once the command has logged (it
ran: a store or an engine answered). A mistake refused before that (a misspelt name, a file
that is no scenario) leaves nothing behind: its one-line message is all there is to know.

The file is ``dlsched-runs/logs/<command>-<UTC time>-<pid>.log`` in the working directory,
created only when something is written; where that cannot be written (a read-only or full disk),
the same name in the system's temporary folder; and where neither can, nothing. A log is never
what fails a command: MLflow logs from inside a store's creation, and the command's own failure
may be the full disk its log is on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

#: Loggers of the libraries whose messages go to the log file.
NOISY_LOGGERS: tuple[str, ...] = ("mlflow", "alembic", "urllib3", "docker")
#: The parent folder of the log files, relative to the working directory.
LOG_FOLDER = Path("dlsched-runs") / "logs"

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class CommandLog:
    """Where one command's library messages and tracebacks go.

    Args:
        paths: where the log file may be, in order of preference (see the module docstring).
        verbose: whether the libraries' messages also go to the terminal.
    """

    def __init__(self, paths: Sequence[Path], verbose: bool = False) -> None:
        self._file = _LogFile(paths)
        self.verbose = verbose

    @property
    def path(self) -> Path:
        """The log file: the one written, else the one a first message would go to."""
        return self._file.path

    @property
    def lost(self) -> OSError | None:
        """Why the last text was not written, if it was not."""
        return self._file.lost

    @classmethod
    def open(cls, command: str, verbose: bool = False) -> CommandLog:
        """Route the libraries' loggers for a run of ``command``; see the module docstring."""
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        name = f"{command}-{stamp}-{os.getpid()}.log"
        fallback = Path(tempfile.gettempdir()) / "dlsched" / name
        log = cls([LOG_FOLDER.resolve() / name, fallback], verbose)
        log._route()
        return log

    def _route(self) -> None:
        if not self.verbose:
            # MLflow, imported later by the command that needs it, would otherwise attach its
            # stderr handler then, after this routing (the CLI imports it lazily).
            os.environ["MLFLOW_CONFIGURE_LOGGING"] = "false"
            # Nor its bar per artifact transfer ("Downloading artifacts: 100%", for a model of
            # a few kilobytes, even under --no-progress); a user who set it keeps their choice.
            os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
            logging.getLogger("mlflow").setLevel(logging.INFO)
        handler = _LogHandler(self._file)
        handler.setFormatter(logging.Formatter(_FORMAT))
        for name in NOISY_LOGGERS:
            logger = logging.getLogger(name)
            for existing in list(logger.handlers):
                # an earlier command's file (commands run in one process from Python), and,
                # unless verbose, the stderr handler MLflow attaches when it is imported
                if isinstance(existing, _LogHandler) or not self.verbose:
                    logger.removeHandler(existing)
                    if isinstance(existing, _LogHandler):
                        existing.close()
            if not self.verbose:
                logger.propagate = False
            logger.addHandler(handler)

    def record_failure(self, error: BaseException) -> bool:
        """Append the traceback of ``error``, a refusal, if the command has written its log
        already (see the module docstring); whether it did."""
        return self._file.written and self.record_exception(error)

    def record_exception(self, error: BaseException) -> bool:
        """Append ``error`` with its traceback to the log file; whether it could."""
        return self._file.write(
            f"{time.strftime('%Y-%m-%d %H:%M:%S')} the command failed:\n"
            + "".join(traceback.format_exception(error))
        )


class _LogFile:
    """A log file, created on its first write at the first of its paths that takes one.

    A path whose folder cannot be made or whose file cannot be written before anything was
    written to it gives way to the next; text that no path takes is dropped (:attr:`lost` says
    why), never raised.
    """

    def __init__(self, paths: Sequence[Path]) -> None:
        self._paths = list(paths)
        self._stream: TextIO | None = None
        self.written = False
        self.lost: OSError | None = None

    @property
    def path(self) -> Path:
        return self._paths[0]

    def write(self, text: str) -> bool:
        """Append ``text``; whether it was written."""
        while True:
            try:
                if self._stream is None:
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                    self._stream = self.path.open("a", encoding="utf-8")
                self._stream.write(text)
                self._stream.flush()
            except OSError as error:
                self.lost = error
                if self.written or len(self._paths) == 1:
                    return False  # the start of the log is there: its end is not spread apart
                self._give_up_path()
                continue
            self.written = True
            self.lost = None
            return True

    def _give_up_path(self) -> None:
        """Leave the first path for the next, removing the empty file it may have made."""
        if self._stream is not None:
            with contextlib.suppress(OSError):  # what it could not flush goes to the next path
                self._stream.close()
            self._stream = None
            with contextlib.suppress(OSError):
                self.path.unlink(missing_ok=True)
        self._paths.pop(0)

    def close(self) -> None:
        if self._stream is not None:
            try:
                self._stream.close()
            except OSError as error:
                self.lost = error
            self._stream = None


class _LogHandler(logging.Handler):
    """The libraries' messages to a :class:`_LogFile`: a message it cannot write is dropped,
    never raised into the library that logged it."""

    def __init__(self, file: _LogFile) -> None:
        super().__init__()
        self._file = file

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
        except Exception:  # a malformed message: logging's own report, as any handler gives
            self.handleError(record)
            return
        self._file.write(text + "\n")

    def close(self) -> None:
        self._file.close()
        super().close()
