"""Frozen records: what ``dataclasses.dataclass(frozen=True)`` makes, at about a ninth of its import cost.

Python 3.11's dataclass compiles six methods per frozen class, each with its own ``exec`` (``__init__``,
``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__``, ``__delattr__``): 0.44 ms a class of four fields, and
edgeconv defines 88 of them. A command pays for every one its imports define: 23 for ``edgeconv check`` (its
reader's 6 included), 54 for a build served from the cache (tests/unit/test_record.py measures the
difference). ``record`` lets ``dataclasses`` collect the fields (so ``dataclasses.fields``, ``replace`` and
``asdict`` work as before) and compiles nothing: ``__init__`` sets the fields of the calls records get
directly, and compiles the dataclass's ``__init__`` for any other call, the first time one comes
(:func:`_init`); the other five methods are closures over the field names. 0.05 ms a class.

The methods behave as the frozen dataclass's (tested against it, field by field): ``__init__`` takes the
fields with ``init=True`` in order, with their defaults and default factories, and sets the ``init=False``
ones that have a default; a wrong call fails with the dataclass's message; ``inspect.signature`` gives the
dataclass's; ``__eq__`` compares the ``compare=True`` fields as a tuple between instances of the same class;
``__hash__`` hashes the fields whose ``hash`` (else ``compare``) is true; ``__repr__`` shows the ``repr=True``
fields; assigning or deleting a field raises ``dataclasses.FrozenInstanceError``. A method the class defines
itself is kept. Not supported (refused): ``InitVar`` pseudo-fields, ``__post_init__``, ``kw_only`` fields.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import reprlib
from collections.abc import Callable
from typing import Any, TypeVar, dataclass_transform

T = TypeVar("T")

_MISSING = dataclasses.MISSING


def _values(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """The named attributes of an object, always as a tuple (so one NaN field equals itself, as in a tuple)."""
    if len(names) == 1:
        (name,) = names
        return lambda obj: (getattr(obj, name),)
    if not names:
        return lambda obj: ()
    return operator.attrgetter(*names)


def _init(cls: type, fields: list[dataclasses.Field[Any]]) -> Callable[..., None]:
    """``cls.__init__``.

    The calls records get (each field without a default by position, the rest by position or left to
    their defaults; or every init field by keyword, as ``dataclasses.replace`` calls it) set the values
    straight into the instance's ``__dict__``: 0.75 us for six fields, against 0.57 us by a compiled ``__init__``
    and 0.67 us by a frozen dataclass's (scripts/bench_record.py).
    Any other call (keywords and positions mixed, a wrong call) goes to the ``__init__`` dataclasses would
    write (:func:`_compiled_init`), compiled on the first such call: compiling it took 0.22 ms a class, cold,
    4 ms of ``edgeconv check`` for its 17 records, and most records are never called that way. So a wrong
    call fails with Python's own message for that ``__init__``; ``inspect.signature(cls)`` is the
    dataclass's all the same (:class:`_Signature`)."""
    compiled = functools.cache(lambda: _compiled_init(cls, fields))

    if "__slots__" in cls.__dict__:  # no instance __dict__ to fill
        return _compiled_init(cls, fields)
    init_fields = [f for f in fields if f.init]
    names = tuple(f.name for f in init_fields)
    keys = frozenset(names)
    count = len(names)
    required = sum(1 for f in init_fields if f.default is _MISSING and f.default_factory is _MISSING)
    # A dataclass puts every init field without a default first (else "non-default argument follows
    # default argument"): those after the first ``required`` all have one.
    defaults = tuple((f.name, f.default, f.default_factory) for f in init_fields[required:])
    derived = tuple((f.name, f.default, f.default_factory) for f in fields
                    if not f.init and (f.default is not _MISSING or f.default_factory is not _MISSING))

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        given = len(args)
        if kwargs:
            if given or len(kwargs) != count or kwargs.keys() != keys:
                return compiled()(self, *args, **kwargs)
            values = self.__dict__
            values.update(kwargs)
        elif required <= given <= count:
            values = self.__dict__
            values.update(zip(names, args))
            for name, default, factory in defaults[given - required:]:
                values[name] = default if factory is _MISSING else factory()
        else:
            return compiled()(self, *args, **kwargs)
        for name, default, factory in derived:
            values[name] = default if factory is _MISSING else factory()
        return None

    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    return __init__


class _Factory:
    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()  # a default factory in a signature, as dataclasses shows it


class _Signature:
    """A record's ``__signature__`` (what ``inspect.signature`` reads), the frozen dataclass's: its init
    fields with their types and defaults, made when first asked for. Only for the record itself: a subclass
    has its own fields or ``__init__``."""

    def __init__(self, cls: type, fields: list[dataclasses.Field[Any]]) -> None:
        self.cls = cls
        self.fields = fields
        self.made: Any = None

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if owner is not self.cls:
            raise AttributeError("__signature__")
        if self.made is None:
            import inspect

            empty, kind = inspect.Parameter.empty, inspect.Parameter.POSITIONAL_OR_KEYWORD
            self.made = inspect.Signature(
                [inspect.Parameter(f.name, kind, annotation=f.type, default=(
                    f.default if f.default is not _MISSING else _FACTORY if f.default_factory is not _MISSING
                    else empty)) for f in self.fields if f.init], return_annotation=None)
        return self.made


def _compiled_init(cls: type, fields: list[dataclasses.Field[Any]]) -> Callable[..., None]:
    """``cls.__init__`` as dataclasses writes it, compiled: the init fields as parameters, every field with a
    value set through ``object.__setattr__`` (the instance is frozen)."""
    scope: dict[str, Any] = {"__setattr": object.__setattr__, "__MISSING": _MISSING}
    params: list[str] = []
    body: list[str] = []
    for k, f in enumerate(fields):
        factory, default = f.default_factory, f.default
        if factory is not _MISSING:
            scope[f"__factory{k}"] = factory
        elif default is not _MISSING:
            scope[f"__default{k}"] = default
        if f.init:
            if factory is not _MISSING:
                params.append(f"{f.name}=__MISSING")
                value = f"__factory{k}() if {f.name} is __MISSING else {f.name}"
            elif default is not _MISSING:
                params.append(f"{f.name}=__default{k}")
                value = f.name
            else:
                params.append(f.name)
                value = f.name
        elif factory is not _MISSING:
            value = f"__factory{k}()"
        elif default is not _MISSING:
            value = f"__default{k}"
        else:  # no value to set: the field stays unset, as in a dataclass
            continue
        body.append(f"  __setattr(self, {f.name!r}, {value})")
    source = (f"def __create__({', '.join(scope)}):\n def __init__(self, {', '.join(params)}):\n"
              + ("\n".join(f" {line}" for line in body) or "  pass") + "\n return __init__\n")
    namespace: dict[str, Any] = {}
    exec(source, {}, namespace)  # edgeconv's own field names, as dataclasses does
    init: Callable[..., None] = namespace["__create__"](*scope.values())
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    return init


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, dataclasses.Field))
def record(cls: type[T]) -> type[T]:
    """``cls`` as ``dataclasses.dataclass(frozen=True)`` would make it (module docstring)."""
    if "__post_init__" in cls.__dict__:
        raise TypeError(f"{cls.__qualname__}: record does not call __post_init__; use dataclasses.dataclass")
    own = dict(cls.__dict__)  # what the class defines itself, before anything is added
    documented = bool(own.get("__doc__"))
    if not documented:
        cls.__doc__ = cls.__name__  # dataclass would look up the class's signature for it: set below
    dataclasses.dataclass(cls, init=False, repr=False, eq=False)
    fields = list(dataclasses.fields(cls))  # type: ignore[arg-type]
    initvar = dataclasses._FIELD_INITVAR  # type: ignore[attr-defined]
    if any(f.kw_only is True for f in fields) or any(
            f._field_type is initvar for f in getattr(cls, "__dataclass_fields__", {}).values()):
        raise TypeError(f"{cls.__qualname__}: record takes no InitVar or kw_only fields; use dataclasses.dataclass")
    names = frozenset(f.name for f in fields)
    init = _init(cls, fields)
    cls.__init__ = init  # type: ignore[method-assign]
    cls.__signature__ = _Signature(cls, fields)  # type: ignore[attr-defined]
    if not documented:
        cls.__doc__ = f"{cls.__name__}({', '.join(_param(f) for f in fields if f.init)})"

    if "__repr__" not in own:
        shown = tuple(f.name for f in fields if f.repr)

        @reprlib.recursive_repr()
        def __repr__(self: Any) -> str:
            return f"{self.__class__.__qualname__}({', '.join(f'{n}={getattr(self, n)!r}' for n in shown)})"

        __repr__.__qualname__ = f"{cls.__qualname__}.__repr__"
        cls.__repr__ = __repr__  # type: ignore[method-assign]
    if "__eq__" not in own:
        compared = _values(tuple(f.name for f in fields if f.compare))

        def __eq__(self: Any, other: object) -> bool:
            if other.__class__ is self.__class__:
                return compared(self) == compared(other)
            return NotImplemented

        __eq__.__qualname__ = f"{cls.__qualname__}.__eq__"
        cls.__eq__ = __eq__  # type: ignore[method-assign]
    # A class that defines __eq__ gets __hash__ = None from Python: not its own choice (dataclasses' rule).
    if own.get("__hash__", _MISSING) is _MISSING or (own["__hash__"] is None and "__eq__" in own):
        hashed = _values(tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash)))

        def __hash__(self: Any) -> int:
            return hash(hashed(self))

        __hash__.__qualname__ = f"{cls.__qualname__}.__hash__"
        cls.__hash__ = __hash__  # type: ignore[method-assign]

    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    for method in (__setattr__, __delattr__):
        if method.__name__ in own:
            raise TypeError(f"Cannot overwrite attribute {method.__name__} in class {cls.__name__}")
        method.__qualname__ = f"{cls.__qualname__}.{method.__name__}"
        setattr(cls, method.__name__, method)
    return cls


def _param(f: dataclasses.Field[Any]) -> str:
    """A field as the class's signature shows it: name, type, default."""
    text = f"{f.name}: {f.type!r}" if isinstance(f.type, str) else f"{f.name}: {getattr(f.type, '__name__', f.type)}"
    if f.default is not _MISSING:
        text += f" = {f.default!r}"
    elif f.default_factory is not _MISSING:
        text += " = <factory>"
    return text
