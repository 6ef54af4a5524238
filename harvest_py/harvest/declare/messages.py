"""Query and update handlers: the declarative ``@query`` / ``@update`` decorators and discovery.

A handler's first parameter is the workflow's ``ctx``; an optional second one is
the argument the client sent (decoded by its type hint); the return value is
encoded as JSON. A validator has the handler's signature and rejects an update
by raising. Register declarative handlers on the App::

    @query(workflow="approval")
    def status(ctx) -> str:
        return ctx.state.get("status", "waiting")

    @update(workflow="approval", validator=check_decision)
    async def decide(ctx, decision: Decision) -> str: ...

    app = App(workflows=[approval], queries=[status], updates=[decide])

``describe_handlers(app, "approval")`` (or ``app.handlers("approval")``) lists a
workflow type's handlers in the shape of the management API's
``/workflows/types/{name}/handlers``. Imperative handlers registered inside the
workflow (``ctx.register_query_handler``) exist only in a running instance and
are not listed.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar, cast, overload

from harvest.core.errors import ConfigError, InvalidArgument, NotFound, PayloadError
from harvest.core.payload import _safe_hints, decode

__all__ = ["HandlerDefinition", "describe_handlers", "query", "register_handlers", "update"]


@dataclass
class HandlerDefinition:
    """One query or update handler of a workflow type."""

    kind: str  # "query" | "update"
    name: str
    fn: Callable[..., Any]
    workflow: str | None = None  # None: registered inside a workflow instance
    validator: Callable[..., Any] | None = None

    @property
    def takes_arg(self) -> bool:
        return _takes_arg(self.fn)

    def arg_hint(self) -> Any:
        params = _positional(self.fn)
        if len(params) < 2:
            return None
        return _safe_hints(self.fn).get(params[1].name, Any)

    def return_hint(self) -> Any:
        return _safe_hints(self.fn).get("return", Any)

    def decode_arg(self, raw: Any, *, refuse_extra: bool = True) -> tuple[Any, ...]:
        """The positional arguments after ctx: ``()`` or ``(decoded arg,)``. An argument
        (anything but None, which is what a call without one sends) for a handler that takes
        none is a TypeError: dropped, its caller would believe it was used.
        ``refuse_extra=False``: drop it (an update already accepted, replayed)."""
        if not self.takes_arg:
            if raw is not None and refuse_extra:
                raise TypeError(
                    f"{self.kind} {self.name!r} takes no argument: its handler is "
                    f"{_shape(self.fn)}; it was given {_short(raw)} ({type(raw).__name__}). "
                    f"Call it without one, or give the handler a second parameter (ctx, arg)"
                )
            return ()
        if raw is None:  # no argument given (or None sent): the parameter's default, if it has one
            param = _positional(self.fn)[1]
            if param.default is not param.empty:
                return ()
            try:
                return (decode(None, self.arg_hint(), f"{self.kind} {self.name!r} argument"),)
            except PayloadError:  # (a hint that allows None takes it)
                raise TypeError(
                    f"{self.kind} {self.name!r} takes an argument: its handler is {_shape(self.fn)}; "
                    f"none was given (pass it: handle.{self.kind}({self.name!r}, value))"
                ) from None
        return (decode(raw, self.arg_hint(), f"{self.kind} {self.name!r} argument"),)

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "input_type_hint": type_hint_name(self.arg_hint()),
            "output_type_hint": type_hint_name(self.return_hint()),
        }
        if self.kind == "update":
            out["has_validator"] = self.validator is not None
        return out


def _shape(fn: Callable[..., Any]) -> str:
    """``name(ctx)``: a handler as a caller reads it in an error."""
    name = getattr(fn, "__name__", "handler")
    try:
        return f"{name}{inspect.signature(fn, eval_str=True)}"  # (hints as types, not 'strings')
    except Exception:  # a hint that does not resolve: as written
        try:
            return f"{name}{inspect.signature(fn)}"
        except (TypeError, ValueError):
            return repr(fn)


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _positional(fn: Callable[..., Any]) -> list[inspect.Parameter]:
    return [
        p
        for p in inspect.signature(fn).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]


def _takes_arg(fn: Callable[..., Any]) -> bool:
    return len(_positional(fn)) >= 2


def check_handler(fn: Any, kind: str, name: str) -> Callable[..., Any]:
    """A handler takes ``(ctx)`` or ``(ctx, arg)``; refuse anything else at registration."""
    if not callable(fn):
        raise TypeError(f"{kind} handler {name!r}: expected a function, got {fn!r}")
    try:
        params = _positional(fn)
    except (TypeError, ValueError):
        return cast("Callable[..., Any]", fn)  # builtins without a signature: trust the caller
    required = [p for p in params if p.default is p.empty]
    if not params or len(required) > 2:
        raise TypeError(
            f"{kind} handler {name!r} ({getattr(fn, '__qualname__', fn)}): a handler "
            "takes (ctx) or (ctx, arg)"
        )
    return cast("Callable[..., Any]", fn)


def type_hint_name(hint: Any) -> str | None:
    """A readable name for a type hint (``None`` when there is no parameter)."""
    if hint is None:
        return None
    if hint is Any:
        return "Any"
    if hint is type(None):
        return "None"
    if isinstance(hint, type) and not typing.get_args(hint):
        return hint.__name__
    return str(hint).replace("typing.", "")


def _check_name(name: Any, what: str) -> str:
    if not isinstance(name, str) or not name.strip():
        raise InvalidArgument(f"{what}: expected a non-empty string, got {name!r}")
    return name


_F = TypeVar("_F", bound=Callable[..., Any])


def _decorator(
    kind: str, workflow: Any, name: str | None, validator: Callable[..., Any] | None
) -> Callable[[_F], _F]:
    wf_name = getattr(getattr(workflow, "__harvest_workflow__", None), "name", None) or workflow
    _check_name(wf_name, f"@{kind}(workflow=...)")
    if validator is not None:
        check_handler(validator, f"{kind} validator", name or "?")

    def wrap(fn: _F) -> _F:
        handler_name = _check_name(name if name is not None else fn.__name__, f"{kind} name")
        check_handler(fn, kind, handler_name)
        setattr(fn, f"__harvest_{kind}__", HandlerDefinition(kind, handler_name, fn, wf_name, validator))
        return fn

    return wrap


# Typed so a checker keeps the handler's own signature (mypy --strict called the
# decorator untyped); the bare form (@query with no workflow) raises TypeError.
@overload
def query(fn: None = None, *, workflow: Any, name: str | None = None) -> Callable[[_F], _F]: ...
@overload
def query(fn: Callable[..., Any], *, workflow: Any = None, name: str | None = None) -> NoReturn: ...
def query(
    fn: Callable[..., Any] | None = None, *, workflow: Any = None, name: str | None = None
) -> Callable[[_F], _F]:
    """Declare a query handler of ``workflow`` (a name or a ``@workflow`` function).

    It must not change the workflow or wait: it reads (``ctx.state``, the arg) and
    returns. Register it with ``App(queries=[...])``.
    """
    if fn is not None:
        raise TypeError('@query needs the workflow: @query(workflow="name")')
    return _decorator("query", workflow, name, None)


@overload
def update(
    fn: None = None,
    *,
    workflow: Any,
    name: str | None = None,
    validator: Callable[..., Any] | None = None,
) -> Callable[[_F], _F]: ...
@overload
def update(
    fn: Callable[..., Any],
    *,
    workflow: Any = None,
    name: str | None = None,
    validator: Callable[..., Any] | None = None,
) -> NoReturn: ...
def update(
    fn: Callable[..., Any] | None = None,
    *,
    workflow: Any = None,
    name: str | None = None,
    validator: Callable[..., Any] | None = None,
) -> Callable[[_F], _F]:
    """Declare an update handler of ``workflow``; ``validator(ctx, arg)`` rejects by raising.

    The handler runs inside the workflow (deterministically, like workflow code: it
    may await activities and timers); register it with ``App(updates=[...])``.
    """
    if fn is not None:
        raise TypeError('@update needs the workflow: @update(workflow="name")')
    return _decorator("update", workflow, name, validator)


def _as_handler(item: Any, kind: str) -> HandlerDefinition:
    defn = item if isinstance(item, HandlerDefinition) else getattr(item, f"__harvest_{kind}__", None)
    if not isinstance(defn, HandlerDefinition) or defn.kind != kind:
        raise TypeError(
            f"App({kind.replace('query', 'querie')}s=...): {item!r} is not decorated "
            f"with @{kind}(workflow=...)"
        )
    return defn


def register_handlers(
    workflow_names: Iterable[str], queries: Iterable[Any], updates: Iterable[Any]
) -> tuple[dict[str, dict[str, HandlerDefinition]], dict[str, dict[str, HandlerDefinition]]]:
    """Build the App's tables: workflow name -> handler name -> definition."""
    known = set(workflow_names)
    tables: dict[str, dict[str, dict[str, HandlerDefinition]]] = {"query": {}, "update": {}}
    for kind, items in (("query", queries), ("update", updates)):
        for item in items:
            defn = _as_handler(item, kind)
            if defn.workflow not in known:
                raise ConfigError(
                    f"@{kind} {defn.name!r} belongs to workflow {defn.workflow!r}, "
                    f"which this App does not register; known: {sorted(known) or 'none'}"
                )
            table = tables[kind].setdefault(defn.workflow, {})
            existing = table.get(defn.name)
            if existing is not None and existing.fn is not defn.fn:
                raise ConfigError(f"duplicate {kind} {defn.name!r} for workflow {defn.workflow!r}")
            table[defn.name] = defn
    return tables["query"], tables["update"]


def describe_handlers(app: Any, workflow: Any) -> dict[str, Any]:
    """``{"workflow", "queries": [{name, input_type_hint, output_type_hint}],
    "updates": [{..., has_validator}]}`` for one registered workflow type."""
    name = getattr(getattr(workflow, "__harvest_workflow__", None), "name", None) or workflow
    if name not in app.workflows:
        raise NotFound(f"no workflow named {name!r} is registered; known: {sorted(app.workflows) or 'none'}")
    queries = getattr(app, "queries", {}).get(name, {})
    updates = getattr(app, "updates", {}).get(name, {})
    return {
        "workflow": name,
        "queries": [queries[n].describe() for n in sorted(queries)],
        "updates": [updates[n].describe() for n in sorted(updates)],
    }
