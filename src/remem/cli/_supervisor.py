"""uvicorn's supervisor for ``remem serve --workers N``, with its workers' health check mended.

The supervisor checks each worker every half second by sending on a pipe and waiting for the answer,
up to the check's timeout (:data:`remem.cli.serve.WORKER_START_TIMEOUT`, 60 s). uvicorn keeps its own
copy of the worker's end of that pipe, so a worker that dies while a check waits on it does not end the
pipe: the supervisor waits out the whole timeout, and meanwhile restarts nobody and handles no signal
(SIGTERM, SIGHUP). :class:`Worker` closes the supervisor's copy once the worker has its own, so a dead
worker's end closes with it and the check sees it at once.
"""

from __future__ import annotations

from typing import Any

from uvicorn.supervisors import multiprocess

__all__ = ["Worker", "run"]


class Worker(multiprocess.Process):
    def start(self) -> None:
        super().start()
        self.child_conn.close()  # the worker holds its own copy now (see the module's docstring)

    def ping(self, timeout: float = 5) -> bool:
        try:
            return bool(super().ping(timeout))
        except (OSError, EOFError):  # its end is closed, the worker died (an older uvicorn raises this)
            return False


def run(config: Any, sockets: list[Any]) -> None:
    """uvicorn's ``Multiprocess(config, sockets).run()``, its workers started as :class:`Worker`."""
    plain = multiprocess.Process
    multiprocess.Process = Worker  # type: ignore[misc]  # the supervisor builds each worker by this name
    try:
        multiprocess.Multiprocess(config, sockets=sockets).run()
    finally:
        multiprocess.Process = plain  # type: ignore[misc]
