"""Imported only by the forkserver (the last module of ``process.PRELOAD``; lesson 00).

The server listens on a socket file in the folder ``multiprocess`` made in the kernel's
temporary folder, which the kernel removes as it exits normally. The server ends after its
kernel and every child it forked have ended; on its way out it removes the socket, and
the folder if nothing else is in it, which a kernel that was killed (SIGKILL) could not.
"""
from __future__ import annotations

import atexit
import os


def _remove_socket() -> None:
    from multiprocess import forkserver
    server = forkserver._forkserver                     # noqa: SLF001 (set by its main())
    path = server._forkserver_address
    if server._forkserver_pid is not None or not isinstance(path, str):
        return                                          # a kernel, not the server
    for remove in (os.unlink, os.rmdir):
        try:
            remove(path)
        except OSError:                                 # gone already, or not empty
            return
        path = os.path.dirname(path)


atexit.register(_remove_socket)
