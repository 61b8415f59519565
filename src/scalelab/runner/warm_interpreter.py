"""The warm interpreter of :mod:`scalelab.runner.warmstart`, run as ``python -m
scalelab.runner.warm_interpreter FD``: it imports :data:`PRELOAD` and :data:`MAINS` once,
says ``R`` on the socket FD, then forks a process for each request that arrives there (the
command line, environment, folder and session asked for, with the standard streams and the
pipe for its exit status passed as descriptors) and sends back its pid; when a process
ends, its wait status goes to its pipe. The fork becomes ``python -m MODULE ARGS``
(:func:`_become`); on end of file it exits at once (nothing to flush or finalize).

Imports nothing beyond the standard library until :func:`main` runs, so that the process
starting it reads the protocol's constants from here without importing torch.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import io
import json
import os
import select
import signal
import socket
import struct
import sys

#: What a warm interpreter imports before it serves: torch, what its first optimizer
#: imports (``torch._dynamo`` and sympy) and the modules this package runs as processes.
PRELOAD = ("torch", "torch.distributed", "torch._dynamo", "scalelab.profiler")

#: The modules this package runs as processes: their imports are made too, but each runs
#: afresh as ``__main__``, as ``-m`` runs it.
MAINS = ("scalelab.runner.entry", "scalelab.experiment.timing_child")

HEADER = struct.Struct("!I")  # a request's length, then its JSON
STATUS = struct.Struct("!i")  # a wait status, on a process's own pipe
_PR_SET_PDEATHSIG = 1
_CLONE_NEWNET = 0x40000000


def die_with_parent() -> None:
    """Ask for SIGKILL when this process's parent ends (Linux; elsewhere nothing)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _serve(sock: socket.socket) -> dict | None:
    """Serve requests until the socket closes (None); in a forked child, its request."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    status_of: dict[int, int] = {}  # pid -> fd its exit status goes to
    buf = b""
    while True:
        try:
            ready, _, _ = select.select([sock, wake_r], [], [])
        except InterruptedError:
            continue
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 4096)
            _reap(status_of)
        if sock not in ready:
            continue
        data, fds, _, _ = socket.recv_fds(sock, 1 << 16, 4)
        if not data:
            return None
        buf += data
        while len(buf) < HEADER.size or len(buf) < HEADER.size + HEADER.unpack(
                buf[:HEADER.size])[0]:
            more = sock.recv(1 << 16)
            if not more:
                return None
            buf += more
        n = HEADER.unpack(buf[:HEADER.size])[0]
        request = json.loads(buf[HEADER.size:HEADER.size + n])
        buf = buf[HEADER.size + n:]
        try:
            pid = os.fork()
        except OSError as e:
            for fd in fds:
                os.close(fd)
            sock.sendall(struct.pack("!ii", -1, e.errno or errno.EAGAIN))
            continue
        if pid == 0:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for fd in (wake_r, wake_w, *status_of.values(), fds[3]):
                os.close(fd)
            sock.close()
            request["fds"] = fds[:3]
            return request
        for fd in fds[:3]:
            os.close(fd)
        status_of[pid] = fds[3]
        sock.sendall(struct.pack("!ii", pid, 0))
        _reap(status_of)


def _reap(status_of: dict[int, int]) -> None:
    while status_of:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        fd = status_of.pop(pid, None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.write(fd, STATUS.pack(status))
            os.close(fd)


def _become(request: dict) -> None:
    """In the forked child: become ``python -m MODULE ARGS`` as the request asks."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if request["new_session"]:
        os.setsid()
    if request["die_with_parent"]:
        die_with_parent()
    for target, fd in enumerate(request["fds"]):
        if fd != target:
            os.dup2(fd, target)
    for fd in set(request["fds"]):
        if fd > 2:
            os.close(fd)
    if request["netns"] is not None:
        _enter_netns(request["netns"])
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    _standard_streams(bool(request["env"].get("PYTHONUNBUFFERED")))
    module, *args = request["argv"]
    sys.argv = [module, *args]  # runpy puts the module's file first
    sys.path[0] = os.getcwd()


def _enter_netns(name: str) -> None:
    """Enter network namespace ``name`` as ``ip netns exec`` does, or end as it ends."""
    try:
        fd = os.open(f"/run/netns/{name}", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        _leave_early(f'Cannot open network namespace "{name}": {e.strerror}')
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    if libc.setns(fd, _CLONE_NEWNET) != 0:
        _leave_early(f'setting the network namespace "{name}" failed: '
                     f"{os.strerror(ctypes.get_errno())}")
    os.close(fd)


def _leave_early(message: str) -> None:
    os.write(2, (message + "\n").encode())
    os._exit(255)


def _standard_streams(unbuffered: bool) -> None:
    """New sys.stdin/stdout/stderr on descriptors 0-2, buffered as Python buffers them."""
    enc, errors = sys.stdout.encoding, sys.stdout.errors

    def out(fd: int, is_err: bool) -> io.TextIOWrapper:
        tty = os.isatty(fd)
        raw = io.FileIO(fd, "w", closefd=False)
        binary = raw if unbuffered else io.BufferedWriter(raw)
        return io.TextIOWrapper(binary, encoding=enc,
                                errors="backslashreplace" if is_err else errors,
                                line_buffering=(tty or is_err) and not unbuffered,
                                write_through=unbuffered)

    sys.stdin = sys.__stdin__ = io.TextIOWrapper(
        io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding=enc, errors=errors)
    sys.stdout = sys.__stdout__ = out(1, False)
    sys.stderr = sys.__stderr__ = out(2, True)


def main() -> None:
    import importlib
    import runpy

    sock = socket.socket(fileno=int(sys.argv[1]))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the terminal's ^C is its parent's to take
    for name in (*PRELOAD, *MAINS):
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    for name in MAINS:
        if name in sys.modules:
            parent, _, leaf = name.rpartition(".")
            del sys.modules[name]
            with contextlib.suppress(AttributeError):
                delattr(sys.modules[parent], leaf)
    import torch

    if torch.cuda.is_initialized():  # never: a fork would inherit a device context
        return
    sys.stdout.flush()
    sys.stderr.flush()
    sock.sendall(b"R")
    request = _serve(sock)
    if request is None:  # nothing to flush or finalize (finalizing took 1.1 s here)
        os._exit(0)
    _become(request)
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
