"""edgeconv._record.record against dataclasses.dataclass(frozen=True): the same classes made both ways behave the
same (construction, defaults and factories, equality, hashing, repr, frozenness, fields, replace, asdict,
match_args, inheritance), a method the class defines is kept, what record does not support is refused, and it
costs less to make."""

from __future__ import annotations

import dataclasses
import inspect
import math
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from edgeconv._record import record


def _both(make: Callable[[Callable[[type], type]], type]) -> tuple[type, type]:
    """The class ``make`` defines, made by record and by the frozen dataclass."""
    return make(record), make(dataclasses.dataclass(frozen=True))


def _plain(deco: Callable[[type], type]) -> type:
    class Plain:
        """Two fields without defaults, then a default, a factory (not hashed: a list), a field left out of
        repr and compare, one not in __init__ with a factory, and one not hashed."""

        a: int
        b: str
        c: float = 1.5
        d: list[int] = dataclasses.field(default_factory=list, hash=False)
        e: bytes = dataclasses.field(default=b"", repr=False, compare=False)
        f: dict[str, int] = dataclasses.field(default_factory=dict, init=False, compare=False, repr=False)
        g: tuple[int, ...] = dataclasses.field(default=(), hash=False)

    return deco(Plain)


def _child(deco: Callable[[type], type]) -> type:
    @deco
    class Base:
        """A base."""

        x: int
        y: str = "y"

    class Child(Base):
        """Its subclass adds a field."""

        z: float = 0.0

    return deco(Child)


def _undocumented(deco: Callable[[type], type]) -> type:
    class Undocumented:
        n: int
        m: str = "m"

    return deco(Undocumented)


CALLS: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    ((1, "b"), {}), ((1, "b", 2.5), {}), ((1, "b", 2.5, [3], b"x", (4,)), {}),  # by position: set directly
    ((), {"a": 1, "b": "b", "c": 2.0, "d": [1], "e": b"", "g": (5,)}),  # every field by keyword: directly
    ((1, "b", 2.5, [3]), {"e": b"x", "g": (4,)}), ((), {"a": 2, "b": "c", "d": [1, 2]}),  # the compiled __init__
]


@pytest.mark.parametrize(("args", "kwargs"), CALLS)
def test_construction_equality_hash_and_repr_are_the_dataclass_s(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    mine, theirs = _both(_plain)
    a, b = mine(*args, **kwargs), theirs(*args, **kwargs)
    assert repr(a) == repr(b)
    assert vars(a) == vars(b)
    assert hash(a) == hash(b)
    assert a == mine(*args, **kwargs)
    assert not a != mine(*args, **kwargs)  # noqa: SIM202 - __ne__ from __eq__
    assert a != b  # another class: not equal, as two dataclasses are not
    assert a == dataclasses.replace(a, e=b"other")  # e is not compared
    assert a != dataclasses.replace(a, c=9.0)
    assert hash(a) == hash(dataclasses.replace(a, g=(7,)))  # g is not hashed
    assert dataclasses.asdict(a) == dataclasses.asdict(b)
    assert [(f.name, f.default, f.init, f.repr, f.compare) for f in dataclasses.fields(a)] == \
           [(f.name, f.default, f.init, f.repr, f.compare) for f in dataclasses.fields(b)]
    assert mine.__match_args__ == theirs.__match_args__ == ("a", "b", "c", "d", "e", "g")  # type: ignore[attr-defined]
    if len(args) < 4 and "d" not in kwargs:  # each instance its own list from the factory
        assert a.d == [] and a.d is not mine(*args, **kwargs).d  # type: ignore[attr-defined]
    assert a.f == {} and a.f is not mine(*args, **kwargs).f  # type: ignore[attr-defined]  # init=False


@pytest.mark.parametrize("make", [_plain, _child, _undocumented])
def test_the_signature_is_the_dataclass_s(make: Callable[[Callable[[type], type]], type]) -> None:
    mine, theirs = _both(make)
    assert str(inspect.signature(mine)) == str(inspect.signature(theirs))
    assert inspect.signature(mine) == inspect.signature(mine)

    class Sub(mine):  # type: ignore[valid-type,misc]
        def __init__(self, only: int) -> None:
            pass

    assert str(inspect.signature(Sub)) == "(only: 'int') -> 'None'"


@pytest.mark.parametrize("bad", [((), {}), ((1,), {}), ((1, "b"), {"f": {}}), ((1, "b"), {"z": 1}),
                                 ((1, "b", 1.0, [], b"", (), 9), {}),
                                 ((), {"a": 1, "b": "b", "c": 2.0, "d": [], "e": b"", "z": ()}),
                                 ((), {"a": 1, "b": "b", "c": 2.0, "d": [], "e": b"", "f": {}})])
def test_a_wrong_call_fails_as_the_dataclass_s_does(bad: tuple[tuple[Any, ...], dict[str, Any]]) -> None:
    mine, theirs = _both(_plain)
    errors = []
    for cls in (mine, theirs):
        with pytest.raises(TypeError) as caught:
            cls(*bad[0], **bad[1])
        errors.append(str(caught.value))
    assert errors[0] == errors[1]


@pytest.mark.parametrize("change", [lambda o: setattr(o, "a", 2), lambda o: setattr(o, "new", 2),
                                    lambda o: delattr(o, "b"), lambda o: delattr(o, "c")])
def test_fields_and_new_attributes_are_frozen_with_the_dataclass_s_message(change: Callable[[Any], None]) -> None:
    messages = []
    for cls in _both(_plain):
        obj = cls(1, "b")
        before = dict(vars(obj))
        with pytest.raises(dataclasses.FrozenInstanceError) as caught:
            change(obj)
        assert vars(obj) == before
        messages.append(str(caught.value))
    assert messages[0] == messages[1]


def test_a_subclass_takes_its_base_s_fields_first() -> None:
    mine, theirs = _both(_child)
    a, b = mine(1, "q", 2.0), theirs(1, "q", 2.0)
    assert repr(a) == repr(b) and vars(a) == vars(b) and hash(a) == hash(b)
    assert [f.name for f in dataclasses.fields(a)] == ["x", "y", "z"]
    with pytest.raises(dataclasses.FrozenInstanceError, match=r"^cannot assign to field 'x'$"):
        a.x = 3  # type: ignore[attr-defined]


def test_an_undocumented_class_gets_its_signature_as_its_doc() -> None:
    mine, theirs = _both(_undocumented)
    assert mine.__doc__ == theirs.__doc__ == "Undocumented(n: 'int', m: 'str' = 'm')"


def test_one_nan_field_equals_itself_as_in_a_tuple() -> None:
    @record
    class One:
        """One field."""

        v: float

    nan = math.nan
    assert One(nan) == One(nan)  # (nan,) == (nan,): the same object
    assert One(1.0) != One(2.0) and One(1.0) == One(1.0)


def test_methods_the_class_defines_are_kept() -> None:
    @record
    class Own:
        """It says how it is shown, compared and hashed."""

        v: int

        def __repr__(self) -> str:
            return "own"

        def __eq__(self, other: object) -> bool:
            return True

        def __hash__(self) -> int:
            return 7

    assert (repr(Own(1)), Own(1) == Own(2), hash(Own(1))) == ("own", True, 7)


def test_an_eq_without_hash_gets_the_fields_hash_as_with_a_dataclass() -> None:
    def make(deco: Callable[[type], type]) -> type:
        class Eq:
            """Compared by itself."""

            v: int

            def __eq__(self, other: object) -> bool:
                return isinstance(other, Eq) and other.v == self.v

        return deco(Eq)

    mine, theirs = _both(make)
    assert hash(mine(3)) == hash(theirs(3))


@pytest.mark.parametrize(("body", "said"), [
    ("x: int\n    def __post_init__(self) -> None: pass", "record does not call __post_init__"),
    ("x: dataclasses.InitVar[int]", "record takes no InitVar or kw_only fields"),
    ("x: int = dataclasses.field(kw_only=True)", "record takes no InitVar or kw_only fields"),
])
def test_what_record_does_not_do_is_refused(body: str, said: str) -> None:
    namespace: dict[str, Any] = {"record": record, "dataclasses": dataclasses}
    with pytest.raises(TypeError, match=f"^Bad: {said}; use dataclasses.dataclass$"):
        # Compiled without this module's "from __future__ import annotations": dataclasses sees the InitVar.
        exec(compile(f"@record\nclass Bad:\n    {body}\n", "<bad>", "exec", dont_inherit=True), namespace)


def test_a_class_that_sets_setattr_is_refused_as_by_the_dataclass() -> None:
    with pytest.raises(TypeError, match=r"^Cannot overwrite attribute __setattr__ in class Sets$"):
        @record
        class Sets:
            """It sets its own __setattr__."""

            v: int

            def __setattr__(self, name: str, value: Any) -> None:
                pass


def test_making_a_record_costs_less_than_making_the_dataclass() -> None:
    """Fresh interpreters make 200 classes of four fields each way: record at most a quarter of the
    dataclass's time (measured: a ninth; it compiles no ``__init__`` until a call needs one)."""
    code = ("import dataclasses, time\nfrom edgeconv._record import record\n"
            "deco = record if {mine} else dataclasses.dataclass(frozen=True)\nstart = time.perf_counter()\n"
            "for i in range(200):\n"
            "    deco(type(f'C{{i}}', (), {{'__doc__': 'x', '__annotations__': {{'a': 'int', 'b': 'str', "
            "'c': 'float', 'd': 'tuple'}}, 'd': ()}}))\nprint(time.perf_counter() - start)")
    times = {mine: min(float(subprocess.run([sys.executable, "-c", code.format(mine=mine)], check=True,
                                            capture_output=True, text=True).stdout) for _ in range(3))
             for mine in (True, False)}
    assert times[True] < 0.25 * times[False], times
