"""runners/specs/schema.py (the pydantic vocabulary every schema is declared in) and runners/specs/registry.py's
Registry: strict values, one-line messages naming the key, and names registered once, lazily where asked."""
from __future__ import annotations

import dataclasses
import re
import sys

import pytest

from runners.core.errors import SpecError
from runners.specs.registry import Registry
from runners.specs.schema import Bool, Choice, Int, Ints, Num, SettingsError, check, settings
from runners.specs.spec import build_config


@pytest.mark.parametrize("tp, value, message", [
    (Int(2, 10), 11, "11 not allowed; expected an integer in [2, 10]"),
    (Int(2, 10), True, "True not allowed; expected an integer in [2, 10]"),
    (Int(2, 10), "3", "'3' not allowed; expected an integer in [2, 10]"),
    (Int(2, even=True), 3, "3 not allowed; expected an even integer >= 2"),
    (Num(0, lo_open=True), 0.0, "0.0 not allowed; expected a finite number > 0"),
    (Num(0), float("nan"), "nan not allowed; expected a finite number >= 0"),
    (Num(0.5), 0, "0 not allowed; expected a finite number >= 0.5"),
    (Ints(1), [2, 2], "[2, 2] not allowed; expected a non-empty list of distinct integers >= 1 (2 is given twice)"),
    (Ints(1, increasing=True), [3, 2], "[3, 2] not allowed; expected a non-empty strictly increasing list"),
    (Choice(("a", "b")), "c", "'c' not allowed; choose one of ['a', 'b']"),
    (Bool, 1, "1 not allowed; expected true or false"),
])
def test_a_value_outside_its_type_is_one_line_naming_the_key(tp, value, message) -> None:
    with pytest.raises(ValueError) as err:
        check("key", value, tp)
    assert str(err.value).startswith(f"key: {message}") and "\n" not in str(err.value)


def test_numbers_keep_their_type() -> None:
    """An int given for a number stays an int (a results file records the settings as given)."""
    assert type(check("k", 4, Num(0))) is int and type(check("k", 4.0, Num(0))) is float
    assert check("k", (1, 2), Ints(0)) == [1, 2]


@settings
class _Config:
    sizes: Ints(1)
    rate: Num(0, lo_open=True) = 1.0
    models: dict[str, dict] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.rate > 10:
            raise ValueError(f"rate: {self.rate} is more than 10")


def test_settings_are_checked_when_built_and_stay_dataclasses() -> None:
    assert dataclasses.asdict(_Config(sizes=[1, 2])) == {"sizes": [1, 2], "rate": 1.0, "models": {}}
    for kwargs, message in (({"sizes": []}, "sizes: [] not allowed"), ({"sizes": [1], "rate": 11}, "more than 10"),
                            ({"sizes": [1], "colour": 1}, "unknown key(s) ['colour']"),
                            ({"sizes": [1], "models": {"S4 (0.5x)": 3}}, "models.S4 (0.5x): 3 not allowed")):
        with pytest.raises(SettingsError, match=re.escape(message)):
            _Config(**kwargs)


def test_a_plain_dataclass_config_is_checked_as_declared() -> None:
    @dataclasses.dataclass
    class Plain:
        value: float
        n: int = 1

    built = build_config(Plain, {"value": 2.5}, "spec.yaml: tiers.smoke")
    assert type(built) is Plain and built == Plain(2.5)
    with pytest.raises(SpecError, match=r"spec.yaml: tiers.smoke.value: expected float, got 'big'"):
        build_config(Plain, {"value": "big"}, "spec.yaml: tiers.smoke")
    with pytest.raises(SpecError, match=r"unknown key\(s\) \['m'\]; allowed: \['n', 'value'\]"):
        build_config(Plain, {"value": 1.0, "m": 2}, "spec.yaml: tiers.smoke")


def test_a_registry_holds_each_name_once_and_imports_lazy_entries_on_first_lookup() -> None:
    things: Registry = Registry("thing")

    @things.register("one")
    def one() -> int:
        return 1

    with pytest.raises(ValueError, match="thing 'one' registered twice"):
        things.register("one", one)
    sys.modules.pop("colorsys", None)
    things.register_lazy("hls", "colorsys:hls_to_rgb")
    assert "hls" in things and list(things) == ["one", "hls"] and "colorsys" not in sys.modules
    assert things["hls"](0, 0, 0) == (0, 0, 0) and "colorsys" in sys.modules
    things["one"] = lambda: 2  # a stand-in replaces an entry, as a dict's item
    assert things["one"]() == 2
    with pytest.raises(KeyError):
        things["two"]
