"""recipe.run's Components: one field per ablation axis, typed by that axis's base class."""

import dataclasses
import typing

from components import REGISTRIES
from recipe.run import Components, build_components
from recipe.scalerl import SCALERL


def test_each_field_is_typed_by_its_registrys_base_class():
    # An editor (and a type checker) follows run.c.loss(...) to PolicyLoss.__call__ only if the field says so.
    hints = typing.get_type_hints(Components)
    assert [field.name for field in dataclasses.fields(Components)] == list(REGISTRIES)
    assert {axis: hints[axis] for axis in REGISTRIES} == {axis: registry.base for axis, registry in REGISTRIES.items()}
    assert all(isinstance(base, type) and base is not object for base in hints.values())


def test_the_built_components_are_instances_of_their_field_types():
    built = build_components(SCALERL)
    hints = typing.get_type_hints(Components)
    assert [axis for axis in REGISTRIES if not isinstance(getattr(built, axis), hints[axis])] == []
