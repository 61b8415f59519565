"""Warm starts: ``python -m MODULE ARGS`` forked from an interpreter that has already
imported torch, instead of a new interpreter that imports it again.

Every rank and every step-timing process is a Python of its own. Before it trains, each
one imports torch (2.9-3.8 s here) and, building its optimizer, ``torch._dynamo`` and sympy
(2.4 s more). A job of three ranks on two cores spends more of its start
importing than training a short run. A *warm interpreter* imports all of that once, then
waits; each process asked of it is a ``fork`` of it that sets up what a new interpreter
would have (session, standard streams, folder, environment, ``sys.argv``, ``sys.path[0]``)
and runs the module as ``-m`` does. It is what :mod:`multiprocessing`'s forkserver does,
without pickling: the request is the command line and the environment.

Only what cannot differ is shared. An interpreter reads parts of its environment as it
starts or loads a library (GNU OpenMP reads ``GOMP_SPINCOUNT`` when torch loads it, glibc
its ``MALLOC_*`` tuning), so a warm interpreter serves only processes whose environment is
its own but for :data:`LATE`: variables read when a process group or a rank starts, never
at import. Another environment gets a warm interpreter of its own. The warm interpreter
touches no device, so a fork of it starts as clean as a new process (PyTorch asks for
exactly this, spawn or forkserver, when a child will use CUDA); the launchers here still
ask for warm starts only for processes that train on the CPU.

A process started warm is a :class:`subprocess.Popen` in all but its parent: the warm
interpreter is its parent, reaps it, and hands its exit status back through a pipe, so
``poll``, ``wait``, ``communicate``, ``returncode`` and signals work as on any ``Popen``.
``SCALELAB_WARM_START=0`` turns warm starts off.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import inspect
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import OrderedDict

from scalelab.runner import warm_interpreter
from scalelab.runner.warm_interpreter import HEADER, STATUS

#: Variables a warm interpreter's processes may set to their own values: read when a rank
#: or a process group starts (torchrun's, Gloo's and NCCL's, the rank's thread count,
#: Python's output buffering, which the process sets up again itself), never while modules
#: are imported; and pytest's name of the test running, which only pytest reads.
LATE = frozenset({"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                  "MASTER_PORT", "GLOO_SOCKET_IFNAME", "SCALELAB_THREADS",
                  "PYTHONUNBUFFERED", "PYTEST_CURRENT_TEST"})
LATE_PREFIXES = ("NCCL_",)

#: How many warm interpreters (each a few hundred MB) a process keeps at once.
KEEP = 2

_START_TIMEOUT_S = 300.0


def enabled(env: dict | None = None) -> bool:
    """Whether warm starts are on (``SCALELAB_WARM_START`` not ``0``)."""
    return (os.environ if env is None else env).get("SCALELAB_WARM_START", "1") != "0"


def _shared(env: dict) -> dict:
    """``env`` less :data:`LATE`: what a warm interpreter and its processes have in common."""
    return {k: v for k, v in env.items() if k not in LATE and not k.startswith(LATE_PREFIXES)}


def _key(env: dict) -> tuple:
    return tuple(sorted(_shared(env).items()))


_NETNS_EXEC = ["ip", "netns", "exec"]


def _parse(cmd: list[str]) -> tuple[str | None, list[str]] | None:
    """``(NETNS, [MODULE, *ARGS])`` of ``[ip netns exec NETNS] sys.executable -m MODULE
    ARGS`` (NETNS None without the prefix); None for any other command."""
    netns = None
    if cmd[:3] == _NETNS_EXEC and len(cmd) > 4:
        netns, cmd = cmd[3], cmd[4:]
    if len(cmd) >= 3 and cmd[0] == sys.executable and cmd[1] == "-m":
        return netns, list(cmd[2:])
    return None


def popen(cmd: list[str], *, env: dict, warm: bool = True, die_with_parent: bool = False,
          **kwargs) -> subprocess.Popen:
    """``subprocess.Popen(cmd, env=env, **kwargs)``, forked from a warm interpreter when
    ``warm``, warm starts are on, ``cmd`` is ``[sys.executable, "-m", MODULE, ...]``
    (optionally behind ``ip netns exec NETNS``, which the fork enters as that command
    would: its network namespace; not the mount namespace ``ip`` adds for ``/sys``) and a
    warm interpreter for ``env`` starts; a new interpreter otherwise.

    ``die_with_parent``: the process is killed when its parent ends (the warm interpreter,
    which itself ends with this process)."""
    if warm and _parse(cmd) is not None and enabled(env):
        zygote = _zygote_for(env)
        if zygote is not None:
            with contextlib.suppress(OSError):  # it ended or never started
                return WarmPopen(zygote, cmd, env=env, die_with_parent=die_with_parent,
                                 **kwargs)
    preexec = warm_interpreter.die_with_parent if die_with_parent else None
    return subprocess.Popen(cmd, env=env, preexec_fn=preexec, **kwargs)


# -- this process's warm interpreters ----------------------------------------------------

_LOCK = threading.Lock()
_ZYGOTES: OrderedDict[tuple, _Zygote | None] = OrderedDict()
_AT_EXIT = False


def _zygote_for(env: dict) -> _Zygote | None:
    """The warm interpreter for ``env``, started if there is none; None when it cannot
    start (the caller starts a new interpreter instead)."""
    key = _key(env)
    with _LOCK:
        if key in _ZYGOTES:
            _ZYGOTES.move_to_end(key)
            z = _ZYGOTES[key]
            if z is None or z.alive():
                return z
            z.close()
            if not z.started():  # it could not import: do not try again for this env
                _ZYGOTES[key] = None
                return None
        for old in [k for k, z in _ZYGOTES.items() if z is None or not z.busy()]:
            if len(_ZYGOTES) < KEEP:
                break
            z = _ZYGOTES.pop(old)
            if z is not None:
                z.close()
        try:
            z = _Zygote(env)
        except OSError:
            z = None
        global _AT_EXIT
        if not _AT_EXIT:  # reaped here at exit, so that their time counts as this process's
            atexit.register(close_all)
            _AT_EXIT = True
        _ZYGOTES[key] = z
        return z


def close_all() -> None:
    """End this process's warm interpreters (the processes they started end with them)."""
    with _LOCK:
        while _ZYGOTES:
            _, z = _ZYGOTES.popitem()
            if z is not None:
                z.close()


class _Zygote:
    """A warm interpreter, seen from the process that started it."""

    def __init__(self, env: dict):
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            # started from "/", so that nothing it imports comes from this folder
            self.proc = subprocess.Popen(
                [sys.executable, "-m", warm_interpreter.__name__, str(theirs.fileno())],
                env=_shared(env), cwd="/", pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        finally:
            theirs.close()
        self.sock = mine
        self.children: list[WarmPopen] = []
        self._ready: bool | None = None
        self._lock = threading.Lock()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def started(self) -> bool:
        """Whether it said it was ready once."""
        return bool(self._ready)

    def busy(self) -> bool:
        self.children = [c for c in self.children if c.poll() is None]
        return bool(self.children)

    def wait_ready(self) -> bool:
        if self._ready is None:
            r, _, _ = select.select([self.sock], [], [], _START_TIMEOUT_S)
            self._ready = bool(r) and self.sock.recv(1) == b"R"
        return self._ready

    def spawn(self, request: dict, fds: list[int]) -> int:
        """Send one request; the pid of the process it started."""
        if not self.wait_ready():
            raise OSError(errno.ECHILD, "the warm interpreter did not start")
        body = json.dumps(request).encode()
        with self._lock:
            socket.send_fds(self.sock, [HEADER.pack(len(body)) + body], fds)
            reply = _recv_exact(self.sock, 8)
        if len(reply) < 8:
            raise OSError(errno.ECHILD, "the warm interpreter ended")
        pid, err = struct.unpack("!ii", reply)
        if pid <= 0:
            raise OSError(err, os.strerror(err))
        return pid

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            break
        buf += chunk
    return buf


_CHILD_PARAMS = list(inspect.signature(subprocess.Popen._execute_child).parameters)[1:]


class WarmPopen(subprocess.Popen):
    """A :class:`subprocess.Popen` whose process is forked from a warm interpreter."""

    def __init__(self, zygote: _Zygote, cmd: list[str], *, die_with_parent: bool = False,
                 **kwargs):
        self._zygote, self._die_with_parent = zygote, die_with_parent
        self._status_fd: int | None = None
        super().__init__(cmd, **kwargs)
        zygote.children.append(self)

    def _execute_child(self, *args) -> None:
        a = dict(zip(_CHILD_PARAMS, args))
        p2cread, c2pwrite, errwrite = a["p2cread"], a["c2pwrite"], a["errwrite"]
        if errwrite == -1:
            errwrite = 2
        if a["preexec_fn"] is not None or a["pass_fds"] or a["shell"]:
            raise ValueError("a warm start takes no preexec_fn, pass_fds or shell")
        status_r, status_w = os.pipe()
        try:
            fds = [p2cread if p2cread != -1 else 0, c2pwrite if c2pwrite != -1 else 1,
                   errwrite, status_w]
            env = a["env"] if a["env"] is not None else os.environ
            netns, argv = _parse(list(a["args"]))
            request = {"argv": argv, "netns": netns, "env": dict(env),
                       "cwd": os.fspath(a["cwd"]) if a["cwd"] is not None else os.getcwd(),
                       "new_session": bool(a["start_new_session"]),
                       "die_with_parent": self._die_with_parent}
            self.pid = self._zygote.spawn(request, fds)
            self._child_created = True
            self._status_fd, status_r = status_r, None
            os.set_blocking(self._status_fd, False)
        finally:
            os.close(status_w)
            if status_r is not None:
                os.close(status_r)
            # as Popen closes them once its child has them
            if p2cread != -1 and a["p2cwrite"] != -1 and p2cread != getattr(self, "_devnull",
                                                                               None):
                os.close(p2cread)
            if c2pwrite != -1 and a["c2pread"] != -1 and c2pwrite != getattr(self, "_devnull",
                                                                             None):
                os.close(c2pwrite)
            if a["errwrite"] != -1 and a["errread"] != -1 and a["errwrite"] != getattr(
                    self, "_devnull", None):
                os.close(a["errwrite"])
            if hasattr(self, "_devnull"):
                os.close(self._devnull)
            self._closed_child_pipe_fds = True

    def _read_status(self) -> bool:
        """Take the exit status if the warm interpreter has sent it; True once known."""
        if self.returncode is not None:
            return True
        if self._status_fd is None:
            return False
        try:
            data = os.read(self._status_fd, STATUS.size)
        except BlockingIOError:
            return False
        if len(data) == STATUS.size:
            status = STATUS.unpack(data)[0]
            self.returncode = os.waitstatus_to_exitcode(status)
        else:  # the warm interpreter ended without word: the process ended with it
            self.returncode = -signal.SIGKILL
        os.close(self._status_fd)
        self._status_fd = None
        return True

    def _internal_poll(self, _deadstate=None, **_ignored):
        self._read_status()
        return self.returncode

    def _wait(self, timeout):
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._read_status():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)
            select.select([self._status_fd], [], [], left)
        return self.returncode

    def __del__(self, _maxsize=sys.maxsize, _warn=None):
        if self._status_fd is not None and self.returncode is None:
            self._read_status()
        if self._status_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._status_fd)
            self._status_fd = None
