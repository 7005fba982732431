"""The generic registry: registration, lookup errors, parameter checks with key paths."""

from typing import Literal, Optional

import pytest

from components import REGISTRIES
from components.registry import ConfigError, Registry, require


class Base:
    pass


def make_registry():
    registry = Registry("widget", Base)

    @registry.register("plain")
    class Plain(Base):
        def __init__(self, size: int = 3, scale: float = 1.0, label: Optional[str] = None,
                     mode: Literal["a", "b"] = "a", flag: bool = False) -> None:
            require(size > 0, "size", size, "> 0")
            self.size = size

    return registry


def test_duplicate_names_raise():
    registry = make_registry()
    with pytest.raises(ValueError, match="already registered"):
        registry.register("plain")(type("Other", (Base,), {}))


def test_unknown_name_lists_the_valid_names():
    registry = make_registry()
    with pytest.raises(ConfigError, match=r"recipe\.widget: unknown widget 'plian'; valid choices: plain"):
        registry.check({"name": "plian"}, "recipe.widget")


def test_check_fills_defaults_and_builds():
    registry = make_registry()
    assert registry.check({"name": "plain", "size": 5}) == {
        "name": "plain", "size": 5, "scale": 1.0, "label": None, "mode": "a", "flag": False}
    assert registry.build("plain").size == 3


@pytest.mark.parametrize("params, message", [
    ({"sise": 2}, r"widget\.sise: unknown parameter of widget 'plain'; its parameters: size, scale"),
    ({"size": "3"}, r"widget\.size: got '3' \(str\), expected int"),  # no coercion
    ({"size": 2.5}, r"widget\.size: got 2\.5 \(float\), expected int"),
    ({"size": True}, r"widget\.size: got True \(bool\), expected int"),
    ({"scale": "x"}, r"widget\.scale: got 'x' \(str\), expected float"),
    ({"flag": "yes"}, r"widget\.flag: got 'yes' \(str\), expected bool"),
    ({"mode": "c"}, r"widget\.mode: got 'c' \(str\), expected one of \['a', 'b'\]"),
    ({"label": 3}, r"widget\.label: got 3 \(int\), expected str"),
    ({"size": -1}, r"widget\.size: got -1, expected > 0"),
])
def test_bad_parameters_name_the_key_value_and_expectation(params, message):
    with pytest.raises(ConfigError, match=message):
        make_registry().check({"name": "plain", **params})


def test_an_int_is_a_valid_float_and_none_a_valid_optional():
    spec = make_registry().check({"name": "plain", "scale": 2, "label": None})
    assert spec["scale"] == 2 and spec["label"] is None


def test_every_axis_is_registered_with_the_issue_names():
    expected = {
        "loss": {"cispo", "dapo", "gspo", "grpo"},
        "aggregation": {"prompt_mean", "sample_mean", "token_mean"},
        "advantage_norm": {"batch", "prompt", "none"},
        "batch_filter": {"zero_variance", "none"},
        "curriculum": {"no_positive_resampling", "uniform"},
        "length_control": {"interruption", "length_penalty", "none"},
        "off_policy": {"pipeline_rl", "ppo_off_policy"},
        "precision": {"lm_head"},
    }
    assert {axis: set(registry.names()) for axis, registry in REGISTRIES.items()} == expected


def test_every_component_documents_its_formula():
    for registry in REGISTRIES.values():
        for name in registry.names():
            doc = registry.get(name).__doc__
            assert doc and doc.strip(), f"{registry.axis}.{name} has no docstring"
