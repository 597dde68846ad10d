"""A tracking server watched while an evaluation runs, so that its death is said at once.

An evaluation logs to MLflow only when an episode ends, and a Docker episode may last many
minutes: without a watch, a server that dies early would be noticed only then. The watch asks
the server's ``/health`` endpoint every :data:`POLL_S` seconds in a background thread and says,
after :data:`MISSES` checks in a row without an answer (within 2 x (:data:`POLL_S` +
:data:`TIMEOUT_S`) = 20 s of its death), that the server stopped answering, and again when it is
back. Once it is down, the evaluation goes on untracked instead of waiting for it.
"""

from __future__ import annotations

import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable

#: Seconds between two health checks.
POLL_S = 5.0
#: Seconds one health check waits for an answer.
TIMEOUT_S = 5.0
#: Checks in a row without an answer that make the server down (one slow answer does not).
MISSES = 2

#: MLflow's account of a request a server did not answer: the URL, then urllib3's repr of its
#: connection pool, retries and the errors they wrapped, around the one cause that matters.
_UNANSWERED = re.compile(r"API request to \S+ failed with exception HTTPConnectionPool\(")
#: The cause within it: an OS error (``[Errno 111] Connection refused``), else the innermost
#: quoted reason (``Remote end closed connection without response``).
_CAUSE = re.compile(r"\[Errno -?\d+\][^\"')]*|(?<=\(['\"])[^'\"]+(?=['\"]\)+$)")


def brief_failure(text: str) -> str:
    """``text``, a failure to log, with MLflow's account of a request the server did not
    answer (some 400 characters) cut to its cause: ``no answer ([Errno 111] Connection
    refused)``. What follows that account (after ``"; "``) is kept."""
    found = _UNANSWERED.search(text)
    if found is None:
        return text
    end = text.find("; ", found.end())
    end = len(text) if end < 0 else end
    causes = _CAUSE.findall(text[found.end() : end])
    cause = f" ({causes[0].strip()})" if causes else ""
    return f"{text[: found.start()]}no answer{cause}{text[end:]}"


class ServerWatch:
    """Checks a tracking server's health in the background; see the module docstring.

    Args:
        uri: the server's tracking URI (``http://host:port``).
        notify: told when the server stops answering and when it is back (from the watch's
            thread).
        poll_s: seconds between checks.
        timeout_s: seconds one check waits.
        misses: checks in a row without an answer that make the server down.
    """

    def __init__(
        self,
        uri: str,
        notify: Callable[[str], None],
        poll_s: float = POLL_S,
        timeout_s: float = TIMEOUT_S,
        misses: int = MISSES,
    ) -> None:
        self.uri = uri
        self.misses = misses
        self.notify = notify
        self.poll_s = poll_s
        self.timeout_s = timeout_s
        self.down_since: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dlsched-server-watch", daemon=True)

    @property
    def down(self) -> bool:
        """Whether the last check found the server unreachable."""
        return self.down_since is not None

    def start(self) -> ServerWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.timeout_s + 1)

    def _run(self) -> None:
        missed = 0
        while not self._stop.wait(self.poll_s):
            reason = self._check()
            missed = 0 if reason is None else missed + 1
            if missed >= self.misses and self.down_since is None:
                self.down_since = time.time()
                self.notify(
                    f"warning: tracking server {self.uri} stopped answering ({reason}); the "
                    "evaluation goes on untracked, every episode on disk (`dlsched runs sync` "
                    "uploads them when the server is back)"
                )
            elif reason is None and self.down_since is not None:
                self.down_since = None
                self.notify(f"tracking server {self.uri} answers again")

    def _check(self) -> str | None:
        """Why the server does not answer, ``None`` if it does."""
        try:
            with urllib.request.urlopen(self.uri.rstrip("/") + "/health", timeout=self.timeout_s):
                return None
        except urllib.error.HTTPError as error:
            return None if error.code < 500 else f"HTTP {error.code}"
        except (urllib.error.URLError, OSError) as error:
            return str(getattr(error, "reason", error))
