"""A deterministic asyncio event loop for workflow code.

Workflow coroutines must make the same decisions on every replay, so they run on
a loop with no clock, no I/O and no threads: a FIFO of ready callbacks that the
runtime steps by hand until every coroutine is blocked on a durable future. It is
installed as the running loop only while stepping, so a worker can drive it from
inside its own asyncio loop.
"""

from __future__ import annotations

import asyncio
import asyncio.format_helpers
import collections
import contextvars
import logging
from asyncio.events import _get_running_loop, _set_running_loop
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, TypeVarTuple, cast

from harvest.core.errors import NonDeterminismError

__all__ = ["DeterministicEventLoop", "IllegalWorkflowOperation", "WorkflowCallError"]

log = logging.getLogger("harvest.runtime")

# The scheduling methods keep asyncio.AbstractEventLoop's signatures (typeshed's).
_Args = TypeVarTuple("_Args")
_T = TypeVar("_T")

# A workflow that never blocks (``while True: await asyncio.sleep(0)``) would hang the worker.
MAX_CALLBACKS_PER_STEP = 1_000_000


class _Handle(asyncio.Handle):
    """An ``asyncio.Handle`` that ``call_soon`` fills itself: ``Handle.__init__`` is a Python
    call per handle and asks the loop for ``get_debug()`` each time (a replay makes one
    handle per step). The slots are asyncio's own; typeshed leaves these ones out."""

    __slots__ = ()
    if TYPE_CHECKING:
        _callback: Callable[..., object]
        _context: contextvars.Context
        _loop: asyncio.AbstractEventLoop
        _source_traceback: Any
        _repr: str | None


_new_handle = object.__new__


class IllegalWorkflowOperation(NonDeterminismError):
    """Workflow code did something that cannot be replayed (wall-clock sleep, threads, I/O).

    It is a non-determinism error: the workflow task fails (and is retried after a fix)
    rather than the workflow itself.
    """


class WorkflowCallError(IllegalWorkflowOperation):
    """A ``ctx`` method refused how the workflow's code called it (an unknown option, a
    duration that does not parse, a name that is not a string): the code is wrong and a deploy
    fixes it, so the workflow task fails and is retried, the run untouched, as for an
    ``IllegalWorkflowOperation`` (``CommandIssuer.refuse_call``)."""


class DeterministicEventLoop(asyncio.AbstractEventLoop):
    """Ready-queue only; ``time()`` is the workflow's logical time."""

    def __init__(self) -> None:
        self._ready: collections.deque[_Handle] = collections.deque()
        self._closed = False
        self._stepping = False
        self._exception_handler: Callable[..., Any] | None = None
        self._task_factory: Callable[..., Any] | None = None
        self.logical_time = 0.0
        self.fatal_error: BaseException | None = None
        self.tasks_created = 0  # (WorkflowRun.close: has a task other than the main one ever run?)
        # Called each time the ready queue runs dry (ctx.wait_condition's checks: conditions.py);
        # True when it made a callback ready, so the loop runs on. None until a run needs it.
        self.on_idle: Callable[[], bool] | None = None

    # ------------------------------------------------------------------ stepping
    def run_until_idle(self) -> None:
        """Run ready callbacks until none is left: every coroutine is blocked."""
        if self._stepping:
            raise RuntimeError("the workflow loop is already being stepped")
        # A replay sets us as the running loop once for all its steps (WorkflowRun.advance);
        # then there is nothing to set here (a C call that allocates, twice per step).
        prev = _get_running_loop()
        if prev is not self:
            _set_running_loop(self)
        self._stepping = True
        count, ready = 0, self._ready
        try:
            while True:
                while ready:
                    handle = ready.popleft()
                    if handle._cancelled:
                        continue
                    count += 1
                    if count > MAX_CALLBACKS_PER_STEP:
                        self._illegal(
                            "the workflow ran more than "
                            f"{MAX_CALLBACKS_PER_STEP} callbacks without blocking; "
                            "a busy loop never yields to durable events"
                        )
                    # (Handle._run, inline: one call fewer per wake-up of a task)
                    # (a task's wake-up has one argument, passed without building a tuple)
                    args = handle._args
                    try:
                        if len(args) == 1:
                            handle._context.run(handle._callback, args[0])
                        else:
                            handle._context.run(handle._callback, *args)
                    except KeyboardInterrupt:
                        raise  # the process' interrupt (Ctrl-C), not the workflow's doing
                    except SystemExit as exc:
                        # Workflow code's (sys.exit(), a library's argument parser): let through, it
                        # stopped the worker, and every worker that claimed the task after it.
                        self._illegal(
                            f"SystemExit({exc.code!r}) raised in workflow code (sys.exit()?): a workflow "
                            "ends by returning or raising an exception; sys.exit() would stop the worker"
                        )
                    except BaseException as exc:
                        self._callback_failed(handle, exc)
                    if self.fatal_error is not None:
                        break
                # Every coroutine is blocked: a condition that now holds wakes its waiter.
                on_idle = self.on_idle
                if self.fatal_error is not None or on_idle is None or not on_idle():
                    break
        except IllegalWorkflowOperation:
            pass  # recorded in fatal_error; the run reports it
        finally:
            self._stepping = False
            if prev is not self:
                _set_running_loop(prev)

    def _callback_failed(self, handle: _Handle, exc: BaseException) -> None:
        """What ``asyncio.Handle._run`` does with a callback's exception: hand it to the
        loop's exception handler."""
        source = asyncio.format_helpers._format_callback_source(handle._callback, handle._args)
        context: dict[str, Any] = {
            "message": f"Exception in callback {source}",
            "exception": exc,
            "handle": handle,
        }
        if handle._source_traceback:
            context["source_traceback"] = handle._source_traceback
        self.call_exception_handler(context)

    def has_ready(self) -> bool:
        return bool(self._ready)

    def _illegal(self, message: str) -> NoReturn:
        exc = IllegalWorkflowOperation(message)
        if self.fatal_error is None:
            self.fatal_error = exc
        raise exc

    # ------------------------------------------------------------------ scheduling
    def call_soon(
        self,
        callback: Callable[[*_Args], object],
        *args: *_Args,
        context: contextvars.Context | None = None,
    ) -> asyncio.Handle:
        if self._closed:  # (_check_closed, inline: a task's every wake-up comes here)
            raise RuntimeError("the workflow loop is closed")
        # asyncio.Handle(callback, args, self, context), its slots filled here (_Handle)
        handle: _Handle = _new_handle(_Handle)
        handle._callback, handle._args, handle._cancelled = callback, args, False
        handle._loop, handle._source_traceback, handle._repr = self, None, None
        handle._context = context if context is not None else contextvars.copy_context()
        self._ready.append(handle)
        return handle

    def call_later(
        self,
        delay: float,
        callback: Callable[[*_Args], object],
        *args: *_Args,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        self._illegal(
            "asyncio.sleep() and other wall-clock timers are not allowed in a "
            "workflow: use `await ctx.sleep(seconds)` (a durable timer) instead"
        )
        raise AssertionError("unreachable")

    def call_at(
        self,
        when: float,
        callback: Callable[[*_Args], object],
        *args: *_Args,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        return self.call_later(0, callback, *args, context=context)

    def call_soon_threadsafe(
        self,
        callback: Callable[[*_Args], object],
        *args: *_Args,
        context: contextvars.Context | None = None,
    ) -> asyncio.Handle:
        self._illegal("threads are not allowed in a workflow: put the work in an activity")
        raise AssertionError("unreachable")

    def run_in_executor(
        self, executor: Any, func: Callable[[*_Args], _T], *args: *_Args
    ) -> asyncio.Future[_T]:
        self._illegal(
            "run_in_executor / asyncio.to_thread are not allowed in a workflow: "
            "put blocking work in an activity"
        )

    def time(self) -> float:
        return self.logical_time

    def create_future(self) -> asyncio.Future[Any]:
        return asyncio.Future(loop=self)

    def create_task(
        self, coro: Any, *, name: str | None = None, context: contextvars.Context | None = None
    ) -> asyncio.Task[Any]:
        self._check_closed()
        self.tasks_created += 1
        if self._task_factory is not None:
            task = cast("asyncio.Task[Any]", self._task_factory(self, coro))
        else:
            task = asyncio.Task(coro, loop=self, name=name, context=context)
        return task

    def set_task_factory(self, factory: Callable[..., Any] | None) -> None:
        self._task_factory = factory

    def get_task_factory(self) -> Callable[..., Any] | None:
        return self._task_factory

    # ------------------------------------------------------------------ state
    # Never in debug mode. A C callable returning False (bool() is False), not a method:
    # asyncio calls it for every future and handle it makes on this loop, two per replayed step.
    if TYPE_CHECKING:

        def get_debug(self) -> bool: ...
    else:
        get_debug = staticmethod(bool)

    def set_debug(self, enabled: bool) -> None:
        pass

    def is_running(self) -> bool:
        return self._stepping

    def is_closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Drop what was still to run. A task whose first step is among it never started its
        coroutine: that is closed here, or Python would warn "coroutine ... was never awaited"
        at some later collection, pointing at unrelated code (the main task of a run whose
        first step never ran, a task the workflow made just before its step stopped)."""
        ready, self._ready = self._ready, collections.deque()
        self._closed = True
        for handle in ready:
            task = getattr(handle._callback, "__self__", None)  # a task's step, bound to it
            if isinstance(task, asyncio.Task):
                coro: Any = task.get_coro()
                if getattr(coro, "cr_frame", None) is not None and not coro.cr_suspended:
                    coro.close()  # (never started: closing it runs none of its code)

    def _check_closed(self) -> None:
        if self._closed:
            raise RuntimeError("the workflow loop is closed")

    async def shutdown_asyncgens(self) -> None:
        pass

    async def shutdown_default_executor(self) -> None:
        pass

    # ------------------------------------------------------------------ errors
    def set_exception_handler(self, handler: Callable[..., Any] | None) -> None:
        self._exception_handler = handler

    def get_exception_handler(self) -> Callable[..., Any] | None:
        return self._exception_handler

    def default_exception_handler(self, context: dict[str, Any]) -> None:
        # Abandoned futures of an evicted run are expected; keep them out of the logs.
        log.debug("workflow loop: %s", context.get("message"), exc_info=context.get("exception"))

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        if self._exception_handler is not None:
            self._exception_handler(self, context)
        else:
            self.default_exception_handler(context)


# asyncio.AbstractEventLoop's I/O methods, which it leaves unimplemented (a bare
# NotImplementedError, which failed the run for good): what an async HTTP or database client,
# a subprocess or a signal handler awaited in a workflow reaches. Each is an illegal operation
# instead, so the workflow task fails, saying what to do, and is retried once the code is fixed.
_IO_METHODS = (
    "getaddrinfo",
    "getnameinfo",
    "create_connection",
    "create_server",
    "sendfile",
    "start_tls",
    "create_unix_connection",
    "create_unix_server",
    "connect_accepted_socket",
    "create_datagram_endpoint",
    "connect_read_pipe",
    "connect_write_pipe",
    "subprocess_shell",
    "subprocess_exec",
    "add_reader",
    "remove_reader",
    "add_writer",
    "remove_writer",
    "sock_recv",
    "sock_recv_into",
    "sock_recvfrom",
    "sock_recvfrom_into",
    "sock_sendall",
    "sock_sendto",
    "sock_connect",
    "sock_accept",
    "sock_sendfile",
    "add_signal_handler",
    "remove_signal_handler",
)


def _io_refused(name: str) -> Callable[..., NoReturn]:
    def refused(self: DeterministicEventLoop, *args: Any, **kwargs: Any) -> NoReturn:
        self._illegal(
            f"I/O is not allowed in a workflow (loop.{name}: a network, database, subprocess or "
            "signal call): it cannot be replayed; put it in an activity"
        )

    refused.__name__ = refused.__qualname__ = name
    return refused


for _name in _IO_METHODS:
    setattr(DeterministicEventLoop, _name, _io_refused(_name))
