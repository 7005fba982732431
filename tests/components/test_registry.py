"""The generic registry: registration, lookup errors, parameter checks with key paths."""

import inspect
import re
from typing import Literal, Optional

import pytest

from components import REGISTRIES
from components.registry import ConfigError, Registry, require
from sweeps.pruning import PRUNERS


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
        "batch_filter": {"zero_variance", "none", "dynamic_sampling"},
        "curriculum": {"no_positive_resampling", "uniform"},
        "length_control": {"interruption", "length_penalty", "none"},
        "off_policy": {"pipeline_rl", "ppo_off_policy"},
        "precision": {"lm_head"},
        "kl_penalty": {"none", "reference"},
    }
    assert {axis: set(registry.names()) for axis, registry in REGISTRIES.items()} == expected


def test_every_component_documents_its_formula():
    for registry in REGISTRIES.values():
        for name in registry.names():
            doc = registry.get(name).__doc__
            assert doc and doc.strip(), f"{registry.axis}.{name} has no docstring"


def documented_arguments(cls) -> dict[str, str]:
    """The entries of a docstring's "Args:" section, as optuna writes them: {name: its text}."""
    doc = inspect.getdoc(cls) or ""
    if "\nArgs:\n" not in doc:
        return {}
    section = doc.split("\nArgs:\n", 1)[1].split("\n\n", 1)[0]
    entries = re.split(r"\n(?=    \w+: )", "\n" + section)[1:]
    return {entry.split(":", 1)[0].strip(): entry.split(":", 1)[1] for entry in entries}


def test_the_args_reader_sees_each_entry_and_a_missing_section():
    class Documented:
        """f(x).

        Args:
            eps: a clip, in (0, 1) (default 0.2).
            k: a count, in [1, 8]
                (default 8).
        """

    assert documented_arguments(Documented) == {"eps": " a clip, in (0, 1) (default 0.2).",
                                                "k": " a count, in [1, 8]\n        (default 8)."}
    assert documented_arguments(Base) == {}


@pytest.mark.parametrize("registry", [*REGISTRIES.values(), PRUNERS], ids=lambda registry: registry.axis)
def test_every_component_documents_each_argument_with_its_default(registry):
    # Like optuna's pruners: the formula first, then "Args:" with each constructor argument, its range and default.
    for name in registry.names():
        parameters = registry.parameters(name)
        documented = documented_arguments(registry.get(name))
        assert list(documented) == list(parameters), f"{registry.axis}.{name}"
        assert [key for key, text in documented.items() if "default" not in text] == [], f"{registry.axis}.{name}"
