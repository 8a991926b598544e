"""The vocabulary of the suite's schemas, on pydantic v2: strict types with ranges, and one-line messages.

Every setting a file can hold is declared as a type here -- ``Int(2, MAX_GRID)``, ``Num(0, lo_open=True)``,
``Ints(2, MAX_STATE, even=True, increasing=True)``, ``Choice(MODES)``, ``Bool`` -- and pydantic checks it: strict
(no string for a number, no bool for an integer, no NaN or inf), unknown keys refused (``extra="forbid"``). A value
that fails is reported as the suite has always reported it, one line naming the key and what is allowed:

    grid: 1000000000000 not allowed; expected an integer in [2, 1000000]

The runner configs (runners/analytic, benchmark, train), the training configuration (runners/train/config.py), the
spec (runners/specs/spec.py), the expected files (runners/specs/expected.py), the model settings
(runners/specs/model_schema.py) and the results files (runners/store/read.py) are declared with these types;
:func:`problems` turns pydantic's errors into the one-line messages. The ``check_*`` functions check one value the
same way where no declared field holds it (a setting inside a list of mappings, a cross-field rule).

Upper bounds are generous (far above any paper setting) and exist to turn a typo such as ``grid: 1e12`` into
an error instead of an allocation of terabytes.
"""
from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Iterable, Sequence
from typing import Annotated, Any, Callable, Literal, Optional, Union

import annotated_types as at
import pydantic
from pydantic import AfterValidator, AllowInfNan, ConfigDict, Strict, TypeAdapter, ValidationError, WrapValidator
from pydantic_core import PydanticCustomError

#: points of a time grid (the papers' figures use ~1000-2000)
MAX_GRID = 1_000_000
#: state size N of one SSM (the papers use <= 2048)
MAX_STATE = 65_536
#: sequence length (Path-X is 16384)
MAX_LENGTH = 1 << 20
#: model width H
MAX_WIDTH = 65_536

#: the configuration of every schema: strict types, unknown keys refused, no NaN or inf
STRICT = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)

#: the default of a key a schema checks only where it is given (its mapping is kept as written)
UNSET: Any = None

#: the error type of a value outside its declared type or range (its context holds the message's tail)
NOT_ALLOWED = "not_allowed"
#: the error type of a value of another type than declared (text for a number)
WRONG_TYPE = "wrong_type"


def _num_text(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def range_text(lo: float | None, hi: float | None, lo_open: bool = False, hi_open: bool = False) -> str:
    """"in [lo, hi]", "> lo", "<= hi", ... or "finite" without bounds."""
    if lo is not None and hi is not None:
        return f"in {'(' if lo_open else '['}{_num_text(lo)}, {_num_text(hi)}{')' if hi_open else ']'}"
    if lo is not None:
        return f"{'>' if lo_open else '>='} {_num_text(lo)}"
    if hi is not None:
        return f"{'<' if hi_open else '<='} {_num_text(hi)}"
    return "finite"


# ------------------------------------------------------------------------------------------------- the types

def allowed(tail: str, type_name: str | None = None) -> WrapValidator:
    """Report any failure of the inner type as one error: "<value> not allowed; <tail>" (``tail`` e.g. "expected an
    integer >= 1"). A value of another type altogether (text for a number) is a :data:`WRONG_TYPE` error that also
    names ``type_name`` (the type as Python writes it, e.g. "float"); a failure that says more than the type (a
    list's entry given twice) keeps its own tail."""
    def check(value: Any, handler: Callable[[Any], Any]) -> Any:
        try:
            return handler(value)
        except ValidationError as exc:
            errors = exc.errors()
            own = next((e["ctx"]["tail"] for e in errors if e["type"] == NOT_ALLOWED
                        and (e.get("ctx") or {}).get("own")), tail)
            ctx = {"value": _shown(value), "tail": own, "input": value, "type_name": type_name}
            kind = WRONG_TYPE if type_name and all(e["type"].endswith("_type") for e in errors) else NOT_ALLOWED
            raise PydanticCustomError(kind, "{value} not allowed; {tail}", ctx) from None
    return WrapValidator(check)


def _shown(value: Any) -> str:
    """A value as messages print it: its repr, a tuple as the list it was given as."""
    return repr(list(value)) if isinstance(value, tuple) else repr(value)


def _bounds(lo: float | None, hi: float | None, lo_open: bool = False, hi_open: bool = False) -> list[Any]:
    out: list[Any] = []
    if lo is not None:
        out.append(at.Gt(lo) if lo_open else at.Ge(lo))
    if hi is not None:
        out.append(at.Lt(hi) if hi_open else at.Le(hi))
    return out


def _even(value: int) -> int:
    if value % 2:
        raise ValueError("odd")
    return value


@functools.cache
def Int(lo: int | None = None, hi: int | None = None, *, even: bool = False,  # noqa: N802 (a type)
        tail: str | None = None) -> Any:
    """An integer in [lo, hi] (and even if asked); never a bool. ``tail``: the message's "expected ..." instead of
    the one the range gives."""
    inner = Annotated[int, Strict(), *_bounds(lo, hi), *([AfterValidator(_even)] if even else [])]
    what = f"expected {'an even' if even else 'an'} integer {range_text(lo, hi)}"
    return Annotated[inner, allowed(tail or what, "int")]


@functools.cache
def Num(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False,  # noqa: N802 (a type)
        hi_open: bool = False, tail: str | None = None) -> Any:
    """A finite number in the range (open ends where asked): an int stays an int, a float a float; never a bool."""
    bounds = _bounds(lo, hi, lo_open, hi_open)
    if all(b is None or isinstance(b, int) for b in (lo, hi)):
        whole = Annotated[int, Strict(), *bounds]
    else:  # pydantic's int constraints take whole bounds: an int against a fractional one is compared here
        def within(v: int) -> int:
            above = lo is None or (v > lo if lo_open else v >= lo)
            below = hi is None or (v < hi if hi_open else v <= hi)
            if not (above and below):
                raise ValueError("out of range")
            return v

        whole = Annotated[int, Strict(), AfterValidator(within)]
    inner = Union[whole, Annotated[float, Strict(), AllowInfNan(False), *bounds]]
    return Annotated[inner, allowed(tail or f"expected a finite number {range_text(lo, hi, lo_open, hi_open)}",
                                    "float")]


def _ints_what(lo: int | None, hi: int | None, even: bool, increasing: bool, nonempty: bool, distinct: bool) -> str:
    return (f"a {'non-empty ' if nonempty else ''}{'strictly increasing ' if increasing else ''}list of "
            f"{'distinct ' if distinct and not increasing else ''}{'even ' if even else ''}integers "
            f"{range_text(lo, hi)}")


@functools.cache
def Ints(lo: int | None = None, hi: int | None = None, *, even: bool = False,  # noqa: N802 (a type)
         increasing: bool = False, nonempty: bool = True, distinct: bool = True) -> Any:
    """A list of integers, each in [lo, hi] (strictly increasing, non-empty where asked), none given twice unless
    ``distinct=False`` (such lists name cells or columns -- ``state_sizes: [16, 16]`` would measure the cell N=16
    twice and write a results file that reports it twice). A tuple is taken as the list it holds."""
    what = _ints_what(lo, hi, even, increasing, nonempty, distinct)

    def order(values: list[int]) -> list[int]:
        if increasing and values != sorted(set(values)):
            raise ValueError("not increasing")
        if distinct and len(set(values)) != len(values):
            twice = next(v for i, v in enumerate(values) if v in values[:i])
            raise PydanticCustomError(NOT_ALLOWED, "given twice",
                                      {"tail": f"expected {what} ({twice} is given twice)", "own": True})
        return values

    item = Annotated[int, Strict(), *_bounds(lo, hi), *([AfterValidator(_even)] if even else [])]
    inner = Annotated[list[item], Strict(False), *([at.MinLen(1)] if nonempty else []), AfterValidator(order)]
    return Annotated[inner, allowed(f"expected {what}", "list[int]")]


def Choice(choices: Iterable[Any], *, tail: str | None = None) -> Any:  # noqa: N802 (a type)
    """One of ``choices``."""
    return _choice(tuple(choices), tail)


@functools.cache
def _choice(choices: tuple[Any, ...], tail: str | None) -> Any:
    return Annotated[Literal[choices], allowed(tail or f"choose one of {list(choices)}")]


def Choices(choices: Iterable[Any], *, nonempty: bool = True) -> Any:  # noqa: N802 (a type)
    """A list (non-empty where asked) of distinct entries of ``choices``."""
    return _choices(tuple(choices), nonempty)


@functools.cache
def _choices(choices: tuple[Any, ...], nonempty: bool) -> Any:
    def distinct(values: list[Any]) -> list[Any]:
        if len(set(values)) != len(values):
            raise ValueError("repeated")
        return values

    inner = Annotated[list[Literal[choices]], Strict(False), *([at.MinLen(1)] if nonempty else []),
                      AfterValidator(distinct)]
    return Annotated[inner, allowed(f"expected a {'non-empty ' if nonempty else ''}list of distinct entries of "
                                    f"{list(choices)}")]


def _nonblank(text: str) -> str:
    if not text.strip():
        raise ValueError("blank")
    return text


#: text that is not blank
Text = Annotated[Annotated[str, Strict(), AfterValidator(_nonblank)], allowed("expected a non-empty string", "str")]
#: true or false
Bool = Annotated[Annotated[bool, Strict()], allowed("expected true or false", "bool")]
#: a mapping (its keys and values checked where it is used)
Mapping = Annotated[Annotated[dict, Strict()], allowed("expected a mapping", "dict")]


@functools.cache
def Opt(tp: Any) -> Any:  # noqa: N802 (a type)
    """``tp`` or None (the library's default)."""
    return Optional[tp]


# ------------------------------------------------------------------------------------------------- the messages

def key_path(loc: Sequence[Any]) -> str:
    """pydantic's location as the suite writes a key: ``settings[0].length``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part not in ("function-after", "function-wrap", "function-before") and not str(part).startswith(
                ("union[", "tagged-union[", "nullable[", "lax-or-strict[", "json-or-python[")):
            out += f".{part}" if out else str(part)
    return out


@dataclasses.dataclass(frozen=True)
class Problem:
    """One error of a validation: where (the key path), what was given, and the message's text."""

    key: str
    kind: str  # "unknown", "missing", "not_allowed", "value" (a rule across keys) or pydantic's type
    text: str
    value: Any = None
    tail: str = ""  # of a value not allowed: what is ("expected an integer >= 1")
    loc: tuple = ()  # the key path as pydantic's location (keys that hold dots stay whole)
    type_name: str | None = None  # of a value of another type: the type declared ("float")


#: pydantic's type errors in the words of the suite's messages
TYPE_PHRASES = {"dict_type": "a mapping", "list_type": "a list", "string_type": "text", "bool_type": "true or false",
                "int_type": "an integer", "float_type": "a number", "model_type": "a mapping",
                "dataclass_type": "a mapping", "tuple_type": "a list"}
#: pydantic's type errors -> the type as Python writes it
TYPE_NAMES = {"dict_type": "dict", "list_type": "list", "string_type": "str", "bool_type": "bool", "int_type": "int",
              "float_type": "float", "tuple_type": "tuple"}


def problems(exc: ValidationError) -> list[Problem]:
    """pydantic's errors as :class:`Problem` entries, in order (a union's alternatives reported once)."""
    out: list[Problem] = []
    seen: set[tuple[str, str]] = set()
    for err in exc.errors(include_url=False):
        loc = tuple(part for part in err["loc"] if key_path((part,)) or isinstance(part, int))
        key, kind = key_path(loc), err["type"]
        if kind in ("extra_forbidden", "unexpected_keyword_argument"):
            problem = Problem(key, "unknown", "unknown key", err.get("input"), loc=loc)
        elif kind in ("missing", "missing_keyword_argument", "missing_argument"):
            problem = Problem(key, "missing", "missing key", loc=loc)
        elif kind in (NOT_ALLOWED, WRONG_TYPE):
            ctx = err.get("ctx") or {}
            problem = Problem(key, kind, err["msg"], ctx.get("input", err.get("input")), ctx.get("tail", ""),
                              loc=loc, type_name=ctx.get("type_name"))
        elif kind in ("value_error", "assertion_error"):
            text = str(err["ctx"]["error"]) if "error" in (err.get("ctx") or {}) else err["msg"]
            problem = Problem(key, "value", text, loc=loc)
        else:  # a type of pydantic's own (a plain annotation such as ``value: float``)
            tail = f"expected {TYPE_PHRASES.get(kind) or err['msg'].removeprefix('Input should be ').rstrip('.')}"
            problem = Problem(key, WRONG_TYPE if kind in TYPE_NAMES else kind,
                              f"{_shown(err.get('input'))} not allowed; {tail}", err.get("input"), tail, loc=loc,
                              type_name=TYPE_NAMES.get(kind))
        if (problem.key, problem.kind) not in seen:
            seen.add((problem.key, problem.kind))
            out.append(problem)
    return out


def _field_names(tp: Any) -> list[str] | None:
    """The keys a mapping of type ``tp`` may hold (a model's or a dataclass's fields), or None."""
    if isinstance(tp, type) and issubclass(tp, pydantic.BaseModel):
        return list(tp.model_fields)
    if dataclasses.is_dataclass(tp):
        return [f.name for f in dataclasses.fields(tp)]
    return None


def _step(tp: Any, part: Any) -> Any:
    """The type one step of a location inside ``tp`` leads to (a field, a mapping's value, a list's item)."""
    while typing.get_origin(tp) is Annotated:
        tp = typing.get_args(tp)[0]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return _step(inner[0], part) if len(inner) == 1 else None
    if isinstance(tp, type) and issubclass(tp, pydantic.BaseModel):
        field = tp.model_fields.get(part)
        return field.annotation if field is not None else None
    if dataclasses.is_dataclass(tp):
        return typing.get_type_hints(tp, include_extras=True).get(part)
    if origin is dict and len(args) == 2:
        return args[1]
    if origin in (list, tuple) and args:
        return args[0]
    return None


def keys_at(root: Any, loc: Sequence[Any]) -> list[str] | None:
    """The keys allowed in the mapping at ``loc`` (pydantic's location, e.g. ("tasks", "sMNIST")) under the type
    ``root``."""
    tp = root
    for part in loc:
        tp = _step(tp, part) if tp is not None else None
    while tp is not None and typing.get_origin(tp) is Annotated:
        tp = typing.get_args(tp)[0]
    return _field_names(tp) if tp is not None else None


def one_line(found: list[Problem], where: str = "", allowed_keys: Iterable[str] | None = None,
             also: str = "", sep: str = ": ", root: Any = None, types: bool = False) -> str:
    """The first problem as one line under ``where`` (unknown and missing keys gathered: "unknown key(s) [...];
    allowed: [...]", the keys allowed given or found in the schema ``root``); a key's problem is
    "<where><sep><key>: <text>" (``sep`` ": " for a tier's settings, "." for a mapping inside one); with ``types``,
    a value of another type altogether reads "<where>.<key>: expected float, got 'abc'"."""
    prefix = f"{where}: " if where else ""
    first = found[0]
    if types and first.kind == WRONG_TYPE:
        return f"{where}{'.' if where else ''}{first.key}: expected {first.type_name}, got {first.value!r}"
    if first.kind in ("unknown", "missing"):
        parent = first.loc[:-1]
        names = [p.loc[-1] for p in found if p.kind == first.kind and p.loc[:-1] == parent and p.loc]
        at_ = f"{where}{sep}{key_path(parent)}" if where and parent else where or key_path(parent)
        if first.kind == "missing":
            return f"{at_ + ': ' if at_ else ''}missing required key(s) {names}"
        keys = allowed_keys if allowed_keys is not None else (keys_at(root, parent) if root is not None else None)
        listed = f"; allowed: {sorted(keys)}{also}" if keys is not None else ""
        return f"{at_ + ': ' if at_ else ''}unknown key(s) {sorted(names)}{listed}"
    if first.key:
        return f"{where}{sep if where else ''}{first.key}: {first.text}"
    return f"{prefix}{first.text}"


# ------------------------------------------------------------------------------------- one value, checked alone

@functools.cache
def _adapter(tp: Any) -> TypeAdapter:
    return TypeAdapter(tp)


def check(key: str, value: Any, tp: Any) -> Any:
    """``value`` validated as ``tp``; ValueError "<key>: <value> not allowed; <what is>" otherwise."""
    try:
        return _adapter(tp).validate_python(value)
    except ValidationError as exc:
        raise ValueError(f"{key}: {problems(exc)[0].text}") from None


def check_int(key: str, value: Any, lo: int | None = None, hi: int | None = None, *, even: bool = False) -> None:
    """``value`` is an integer in [lo, hi] (and even if asked)."""
    check(key, value, Int(lo, hi, even=even))


def check_num(key: str, value: Any, lo: float | None = None, hi: float | None = None, *, lo_open: bool = False,
              hi_open: bool = False) -> None:
    """``value`` is a finite number in the range (open ends where asked)."""
    check(key, value, Num(lo, hi, lo_open=lo_open, hi_open=hi_open))


def check_ints(key: str, values: Any, lo: int | None = None, hi: int | None = None, *, even: bool = False,
               increasing: bool = False, nonempty: bool = True, distinct: bool = True) -> None:
    """``values`` is a list of integers (see :func:`Ints`)."""
    check(key, values, Ints(lo, hi, even=even, increasing=increasing, nonempty=nonempty, distinct=distinct))


# ------------------------------------------------------------------------------------------ declared settings

class SettingsError(ValueError):
    """Settings that their schema refuses: the message is the first problem as one line (``grid: 0 not allowed;
    ...``); ``problems`` holds them all, for a caller that names the file and the keys allowed."""

    def __init__(self, found: list[Problem], message: str | None = None) -> None:
        super().__init__(message or one_line(found))
        self.problems = found


def settings(cls: type | None = None, *, message: Callable[[list[Problem]], str] | None = None,
             **dataclass_kwargs: Any) -> Any:
    """A pydantic dataclass under :data:`STRICT` (a stdlib dataclass to every reader: ``dataclasses.fields`` and
    ``asdict`` work): its fields are checked by their declared types when it is built, then its ``__post_init__``
    checks the rules across fields; a refusal is a :class:`SettingsError` whose message is ``message(problems)``
    (default :func:`one_line`). Used as ``@settings`` or ``@settings(frozen=True)``."""
    def make(target: type) -> type:
        built = pydantic.dataclasses.dataclass(target, config=STRICT, **dataclass_kwargs)
        init = built.__init__

        @functools.wraps(init)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            try:
                init(self, *args, **kwargs)
            except ValidationError as exc:
                found = problems(exc)
                raise SettingsError(found, message(found) if message else None) from None

        built.__init__ = __init__
        return built

    return make(cls) if cls is not None else make
