"""The log file of one dlsched command: MLflow's own messages and tracebacks, out of the terminal.

MLflow and alembic log at length (schema migrations, every retry of a dead server, full
tracebacks of a refused write) to stderr, where they bury dlsched's one-line message. A command
sends those loggers to its log file instead, and turns off MLflow's bar per artifact transfer,
unless ``--verbose``; dlsched's own warnings stay on stderr. A bug's traceback goes to the file,
which its message names; so does the traceback of a refusal once the command has logged (it
ran: a store or an engine answered). A mistake refused before that (a misspelt name, a file
that is no scenario) leaves nothing behind: its one-line message is all there is to know.

The file is ``dlsched-runs/logs/<command>-<UTC time>-<pid>.log`` in the working directory (the
system's temporary folder if that is not writable), created only when something is written.
"""

from __future__ import annotations

import io
import logging
import os
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

#: Loggers of the libraries whose messages go to the log file.
NOISY_LOGGERS: tuple[str, ...] = ("mlflow", "alembic", "urllib3", "docker")
#: The parent folder of the log files, relative to the working directory.
LOG_FOLDER = Path("dlsched-runs") / "logs"

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


@dataclass
class CommandLog:
    """Where one command's library messages and tracebacks go.

    Attributes:
        path: the log file (it may not exist yet: it is created on the first message).
        verbose: whether the libraries' messages also go to the terminal.
    """

    path: Path
    verbose: bool = False

    @classmethod
    def open(cls, command: str, verbose: bool = False) -> CommandLog:
        """Route the libraries' loggers for a run of ``command``; see the module docstring."""
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        name = f"{command}-{stamp}-{os.getpid()}.log"
        folder = LOG_FOLDER if os.access(".", os.W_OK) else Path(tempfile.gettempdir()) / "dlsched"
        log = cls(folder.resolve() / name, verbose)
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
        handler = _LazyFileHandler(self.path, delay=True, encoding="utf-8")
        handler.setFormatter(logging.Formatter(_FORMAT))
        for name in NOISY_LOGGERS:
            logger = logging.getLogger(name)
            for existing in list(logger.handlers):
                # an earlier command's file (commands run in one process from Python), and,
                # unless verbose, the stderr handler MLflow attaches when it is imported
                if isinstance(existing, _LazyFileHandler) or not self.verbose:
                    logger.removeHandler(existing)
                    if isinstance(existing, _LazyFileHandler):
                        existing.close()
            if not self.verbose:
                logger.propagate = False
            logger.addHandler(handler)

    def record_failure(self, error: BaseException) -> bool:
        """Append the traceback of ``error``, a refusal, if the command has written its log
        already (see the module docstring); whether it did."""
        if not self.path.exists():
            return False
        self.record_exception(error)
        return True

    def record_exception(self, error: BaseException) -> None:
        """Append ``error`` with its traceback to the log file."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as stream:
            stream.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} the command failed:\n")
            traceback.print_exception(error, file=stream)


class _LazyFileHandler(logging.FileHandler):
    """A file handler that creates its folder with the file, on the first message."""

    def _open(self) -> io.TextIOWrapper:
        Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        return super()._open()
