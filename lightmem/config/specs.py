"""Hydra nodes for the settings dataclasses of the library (``SensorySpec``, ``LTMOptions``): a schema
mirrored from the dataclass, so each default is written once, in the dataclass, and the one generic way
back from a node to the (possibly frozen) dataclass."""
from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping, Sequence
from typing import Any

_PLAIN = (bool, int, float, str)


def _schema_type(hint: Any) -> Any:
    """The type a Hydra schema can hold for ``hint``: plain types as they are, a tuple of ints as a list."""
    if hint in _PLAIN:
        return hint
    if typing.get_origin(hint) is tuple:
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        return list[args[0]] if len(set(args)) == 1 and args[0] in _PLAIN else Any
    return Any


def schema_of(cls: type, name: str, drop: Sequence[str] = (), extra: Sequence[tuple[str, type, Any]] = ()) -> type:
    """A mutable dataclass with ``cls``'s fields and defaults (nested dataclasses mirrored too), without the
    fields in ``drop`` and with the ``extra`` ``(name, type, default)`` fields first; Hydra can override
    every field of it (a frozen dataclass would make the node read-only)."""
    fields: list[tuple[str, Any, Any]] = [(n, t, dataclasses.field(default=d)) for n, t, d in extra]
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in drop:
            continue
        hint = hints[f.name]
        if dataclasses.is_dataclass(hint):
            nested = schema_of(hint, f"{name}_{f.name}")
            fields.append((f.name, nested, dataclasses.field(default_factory=nested)))
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        if isinstance(default, tuple):
            default = list(default)
        factory = (lambda v=default: list(v)) if isinstance(default, list) else None
        spec = dataclasses.field(default_factory=factory) if factory else dataclasses.field(default=default)
        fields.append((f.name, _schema_type(hint), spec))
    schema = dataclasses.make_dataclass(name, fields)
    schema.__module__ = cls.__module__
    return schema


def build_spec(cls: type, data: Mapping[str, Any]) -> Any:
    """``cls`` built from the plain mapping ``data`` (a node's container): nested dataclasses from nested
    mappings, lists as tuples where the field is a tuple; a key ``cls`` does not have fails loudly."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise TypeError(f"{cls.__name__} has no setting {', '.join(unknown)}; it has {', '.join(sorted(names))}")
    kwargs = {}
    for key, value in data.items():
        hint = hints[key]
        if dataclasses.is_dataclass(hint) and isinstance(value, Mapping):
            value = build_spec(hint, value)
        elif typing.get_origin(hint) is tuple and isinstance(value, list):
            value = tuple(value)
        kwargs[key] = value
    return cls(**kwargs)
