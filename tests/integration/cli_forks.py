"""`harvest ARGS` as a real process of its own, forked from a warm one instead of started cold.

A cold ``python -c "from harvest.cli import main; main()"`` spends up to a second of CPU
importing the command's modules before it runs, and the CLI tests run hundreds of them. Here a
zygote process imports ``harvest.cli`` and every command's modules once (started with the same
interpreter, PYTHONPATH and locale as the cold command would get) and forks for each command:
the fork gets the caller's arguments, environment, working directory and stdin/stdout/stderr,
then runs ``main()`` at the top level of its interpreter, so exit codes, SystemExit messages,
tracebacks and output are the interpreter's own, as for the cold command. The caller gets a
``subprocess.CompletedProcess`` (text, like ``subprocess.run(..., capture_output=True,
text=True)``) and, on timeout, the same ``subprocess.TimeoutExpired`` after the fork is killed.

What a fork does not redo: the imports (module-level code of harvest and its dependencies ran
once in the zygote; harvest reads its environment variables when a command runs, not at import)
and the hash seed (shared with the zygote). What the zygote imported is frozen (``gc.freeze()``,
so ``gc.get_freeze_count()`` is not 0 in a fork): the collector of a fork, at its exit too,
walked every object the zygote held, copying its memory into the fork page by page (0.2 s of
CPU a command, 0.06 s frozen). A test of the collector's own state starts its process cold
(test_worker_gc_tuning.py does). ``HARVEST_TEST_CLI_FORK=0`` runs every command cold.
"""

from __future__ import annotations

import atexit
import json
import locale
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

COLD = [sys.executable, "-c", "from harvest.cli import main; main()"]

# The zygote: imports the CLI, then forks one handler per connection; the handler forks the
# runner, reports its pid and then its exit code. The runner leaves the loop and calls main()
# at the top level, as `python -c` would.
ZYGOTE = r"""
import ctypes, json, os, signal, socket, sys
ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: gone with the test run
from harvest.cli import main
from harvest.cli.main import load_commands
load_commands()  # the commands' modules load when used: here once, not in every fork
import harvest.worker.worker  # what `harvest worker` and `harvest dev` run (harvest.worker is lazy)
# What the zygote holds now is out of the collector's reach in every fork (as `harvest worker`'s
# own tune_collector does): a fork's collections, and its exit's, walked all of it, writing to
# each object's header and so copying the zygote's memory page by page into the fork: 0.2 s of
# CPU a command, 0.06 s frozen.
import gc
gc.collect()
gc.freeze()
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(sys.argv[1])
listener.listen(64)
print("ready", flush=True)
while True:
    conn, _ = listener.accept()
    try:  # reap finished handlers (their CPU and their commands' counts as the zygote's children's)
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass
    if os.fork():
        conn.close()
        continue
    listener.close()
    head, fds, _, _ = socket.recv_fds(conn, 15, 3)  # the 15-byte length, and the 3 descriptors
    while len(head) < 15:
        head += conn.recv(15 - len(head))
    size = int(head.decode())
    body = b""
    while len(body) < size:
        body += conn.recv(size - len(body))
    request = json.loads(body)
    pid = os.fork()
    if pid == 0:
        conn.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.setpgid(0, 0)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = ["-c", *request["args"]]
        break
    for fd in fds:
        os.close(fd)
    conn.sendall(b"%d\n" % pid)
    _, status = os.waitpid(pid, 0)
    conn.sendall(b"%d\n" % os.waitstatus_to_exitcode(status))
    os._exit(0)
del listener, conn, fds, request, pid, head, size, body
main()
"""

# What the interpreter reads at startup: a zygote serves only callers that agree on these.
_STARTUP_VARS = ("PYTHON", "LANG", "LC_")

_lock = threading.Lock()
_zygotes: dict[tuple[tuple[str, str], ...], _Zygote] = {}


class _Zygote:
    def __init__(self, env: Mapping[str, str]):
        self.dir = tempfile.mkdtemp(prefix="harvest-cli-fork-")
        self.path = os.path.join(self.dir, "s")
        self.log = open(os.path.join(self.dir, "zygote.log"), "wb")  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(
            [sys.executable, "-c", ZYGOTE, self.path],
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self.log,
            start_new_session=True,
        )
        assert self.process.stdout is not None
        if self.process.stdout.readline().strip() != b"ready":
            raise RuntimeError(f"the CLI zygote did not start; see {self.dir}/zygote.log")

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)  # (its socket and log: one left per process run)


def _zygote_for(env: Mapping[str, str]) -> _Zygote:
    key = tuple(sorted((k, v) for k, v in env.items() if k.startswith(_STARTUP_VARS)))
    with _lock:
        zygote = _zygotes.get(key)
        if zygote is None or not zygote.alive():
            zygote = _zygotes[key] = _Zygote(env)
        return zygote


@atexit.register
def stop_all() -> None:
    with _lock:
        for zygote in _zygotes.values():
            zygote.stop()
        _zygotes.clear()


def _text(data: bytes) -> str:
    # subprocess's text mode: the locale's encoding and universal newlines.
    text = data.decode(locale.getpreferredencoding(False))
    return text.replace("\r\n", "\n").replace("\r", "\n")


def run(
    args: Sequence[str],
    env: Mapping[str, str],
    cwd: str | Path | None = None,
    input: str | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run([*COLD, *args], env=env, cwd=cwd, input=input, timeout=timeout,
    capture_output=True, text=True, check=False)``, on a fork of a warm interpreter."""
    if os.environ.get("HARVEST_TEST_CLI_FORK", "1") == "0":
        return subprocess.run(
            [*COLD, *args], env=dict(env), cwd=cwd, input=input, timeout=timeout,
            capture_output=True, text=True, check=False,
        )  # fmt: skip
    zygote = _zygote_for(env)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    in_r, in_w = os.pipe() if input is not None else (os.dup(0), -1)
    request = json.dumps(
        {"args": list(args), "env": dict(env), "cwd": str(cwd if cwd is not None else os.getcwd())}
    ).encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(zygote.path)
        socket.send_fds(conn, [b"%15d" % len(request)], [in_r, out_w, err_w])
        conn.sendall(request)
        for fd in (in_r, out_w, err_w):
            os.close(fd)
        replies = conn.makefile("rb")
        pid = int(replies.readline())
        out: list[bytes] = []
        err: list[bytes] = []

        def drain(fd: int, into: list[bytes]) -> None:
            with open(fd, "rb", closefd=True) as stream:
                into.append(stream.read())

        def feed() -> None:
            with open(in_w, "wb", closefd=True) as stream:
                try:
                    stream.write((input or "").encode(locale.getpreferredencoding(False)))
                except BrokenPipeError:
                    pass

        threads = [
            threading.Thread(target=drain, args=(out_r, out)),
            threading.Thread(target=drain, args=(err_r, err)),
        ]
        if input is not None:
            threads.append(threading.Thread(target=feed))
        for thread in threads:
            thread.daemon = True
            thread.start()
        conn.settimeout(timeout)
        try:
            code = int(replies.readline())
        except (TimeoutError, ValueError):
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            for thread in threads:
                thread.join(5)
            raise subprocess.TimeoutExpired(
                [*COLD, *args], timeout or 0, b"".join(out), b"".join(err)
            ) from None
        for thread in threads:  # a process the command left behind may hold its output open
            thread.join(timeout)
    return subprocess.CompletedProcess([*COLD, *args], code, _text(b"".join(out)), _text(b"".join(err)))
