"""One generic registry for every ablation axis: names -> component classes, with checked parameters.

A component is a small class whose constructor arguments are its whole config. A spec is the dict a
recipe holds for an axis, `{"name": "cispo", "eps_max": 4.0}`; `Registry.check` validates it against
the constructor (names, keys, types) and returns it with every default filled in, so a resolved
config always states every parameter.
"""

from __future__ import annotations

import inspect
import math
import re
import typing
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class ConfigError(ValueError):
    """A user-facing configuration error: names the key path, the bad value and the fix."""


class ParameterError(ConfigError):
    """Raised by a component constructor for an out-of-range parameter; the registry adds the path."""

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(f"{parameter}: {message}")
        self.parameter = parameter
        self.message = message


def require(condition: bool, parameter: str, value: Any, expected: str) -> None:
    """Constructor-side range check: `require(eps_max > 0, "eps_max", eps_max, "> 0")`."""
    if not condition:
        raise ParameterError(parameter, f"got {value!r}, expected {expected}")


def describe_value(value: Any) -> str:
    """A value as an error shows it: its repr and type; a long or multi-line one by its type and size only.

    Values are shown at keys the schema knows (the user typed them there); anything longer than a
    config value, a file pasted where a path belongs, say, is not echoed.
    """
    text = repr(value)
    if len(text) > 60 or "\\n" in text:
        size = f"{len(value)} items" if isinstance(value, (list, tuple, dict)) else f"{len(text)} characters"
        return f"a {type(value).__name__} of {size} (not shown)"
    return f"{text} ({type(value).__name__})"


NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,47}")


def shown_key(key: Any) -> str:
    """A key as an error shows it: a name (letters, digits, '_', '.') as is; anything else is not echoed.

    A key that is not a name is another file's content (a passwd line, a `.env` secret) read as YAML.
    """
    return str(key) if isinstance(key, str) and NAME.fullmatch(key) else "a key that is not a name (not shown)"


def check_value_type(value: Any, annotation: Any, path: str) -> None:
    """Raise ConfigError unless `value` has the annotated type. No coercion: "3" is not an int.

    Accepted annotations: bool, int, float (an int is accepted for a float), str, Optional[X],
    Literal[...], tuple[X, ...] and Dict[str, Any] (any mapping, checked by its user). bool is never
    accepted for int/float, nor int for bool.
    """
    origin = typing.get_origin(annotation)
    if origin is typing.Union:
        options = typing.get_args(annotation)
        if value is None and type(None) in options:
            return
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                check_value_type(value, option, path)
                return
            except ConfigError as error:
                errors.append(error)
        raise errors[0] if len(errors) == 1 else ConfigError(
            f"{path}: got {describe_value(value)}, expected {type_name(annotation)}"
        )
    if origin is typing.Literal:
        choices = typing.get_args(annotation)
        if value not in choices:
            raise ConfigError(f"{path}: got {describe_value(value)}, expected one of {list(choices)}")
        return
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{path}: got {describe_value(value)}, expected a list")
        item_type = typing.get_args(annotation)[0]
        for index, item in enumerate(value):
            check_value_type(item, item_type, f"{path}[{index}]")
        return
    if origin is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path}: got {describe_value(value)}, expected a mapping")
        return
    if annotation is Any:
        return
    if annotation is bool:
        ok = isinstance(value, bool)
    elif annotation is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif annotation is float:  # NaN and inf are never a setting (`target: .inf` would train forever)
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    elif annotation is str:
        ok = isinstance(value, str)
    else:
        raise TypeError(f"{path}: unsupported annotation {annotation!r} in a config schema")
    if not ok:
        finite = " (finite)" if annotation is float and isinstance(value, float) else ""
        raise ConfigError(f"{path}: got {describe_value(value)}, expected {type_name(annotation)}{finite}")


def type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Union:
        return " or ".join(type_name(option) for option in typing.get_args(annotation))
    if origin is typing.Literal:
        return "one of " + str(list(typing.get_args(annotation)))
    if origin is dict:
        return "a mapping"
    if origin is tuple:
        return f"a list of {type_name(typing.get_args(annotation)[0])}"
    if annotation is type(None):
        return "null"
    return getattr(annotation, "__name__", str(annotation))


class Registry(Generic[T]):
    """Names -> component classes for one ablation axis.

    `register(name)` is a class decorator; a duplicate name raises. `get(name)` raises a ConfigError
    listing the valid names. `check(spec, path)` validates a spec against the constructor signature
    (unknown key, missing required parameter, wrong type) and returns it with defaults filled in;
    `build(spec)` checks and instantiates.
    """

    def __init__(self, axis: str, base: type | None = None) -> None:
        self.axis = axis
        self.base = base
        self._classes: dict[str, type[T]] = {}
        self._parameters: dict[str, dict[str, inspect.Parameter]] = {}

    def register(self, name: str) -> Callable[[type[T]], type[T]]:
        def decorator(cls: type[T]) -> type[T]:
            if name in self._classes:
                raise ValueError(
                    f"{self.axis}: {name!r} is already registered to {self._classes[name].__qualname__}"
                )
            if self.base is not None and not issubclass(cls, self.base):
                raise TypeError(f"{self.axis}: {cls.__qualname__} must subclass {self.base.__qualname__}")
            self._classes[name] = cls
            cls.registered_name = name  # type: ignore[attr-defined]
            return cls

        return decorator

    def names(self) -> list[str]:
        return list(self._classes)

    def get(self, name: str, path: str | None = None) -> type[T]:
        if name not in self._classes:
            where = path or self.axis
            raise ConfigError(
                f"{where}: unknown {self.axis} {name!r}; valid choices: {', '.join(self._classes)}"
            )
        return self._classes[name]

    def parameters(self, name: str) -> dict[str, inspect.Parameter]:
        """Constructor parameters of a component, with their annotations resolved to types (computed once)."""
        if name not in self._parameters:
            self._parameters[name] = self._signature(name)
        return self._parameters[name]

    def _signature(self, name: str) -> dict[str, inspect.Parameter]:
        cls = self.get(name)
        if cls.__init__ is object.__init__:
            return {}
        hints = typing.get_type_hints(cls.__init__)
        params = {}
        for param in list(inspect.signature(cls.__init__).parameters.values())[1:]:
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise TypeError(f"{cls.__qualname__}: components take explicit keyword parameters only")
            params[param.name] = param.replace(annotation=hints.get(param.name, Any))
        return params

    def check(self, spec: Mapping[str, Any], path: str | None = None) -> dict[str, Any]:
        """Validate `spec` ({"name": ..., **params}) and return it with every default filled in."""
        path = path or self.axis
        if not isinstance(spec, Mapping):
            raise ConfigError(f"{path}: got {describe_value(spec)}, expected a name or a mapping with 'name'")
        if "name" not in spec:
            raise ConfigError(f"{path}: missing 'name'; valid choices: {', '.join(self._classes)}")
        name = spec["name"]
        if not isinstance(name, str):
            raise ConfigError(f"{path}.name: got {describe_value(name)}, expected one of: {', '.join(self._classes)}")
        self.get(name, path)
        params = self.parameters(name)
        resolved: dict[str, Any] = {"name": name}
        for key in spec:
            if key != "name" and key not in params:
                valid = ", ".join(params) or "none"
                raise ConfigError(f"{path}.{shown_key(key)}: unknown parameter of {self.axis} {name!r}; "
                                  f"its parameters: {valid}")
        for key, param in params.items():
            if key in spec:
                value = spec[key]
                check_value_type(value, param.annotation, f"{path}.{key}")
                resolved[key] = list(value) if isinstance(value, tuple) else value
            elif param.default is inspect.Parameter.empty:
                raise ConfigError(f"{path}.{key}: required parameter of {self.axis} {name!r} is missing")
            else:
                resolved[key] = param.default
        # Range checks live in the constructors (values are checked where they are used); running
        # them here makes loading a config fail early, naming the full path.
        try:
            self._classes[name](**{key: value for key, value in resolved.items() if key != "name"})
        except ParameterError as error:
            raise ConfigError(f"{path}.{error.parameter}: {error.message}") from None
        return resolved

    def build(self, spec: Mapping[str, Any] | str, path: str | None = None) -> T:
        if isinstance(spec, str):
            spec = {"name": spec}
        resolved = self.check(spec, path)
        params = {key: value for key, value in resolved.items() if key != "name"}
        return self._classes[resolved["name"]](**params)
