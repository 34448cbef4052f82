"""`Config`: one point of a space, an immutable knob -> value mapping that round-trips through JSON."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Iterator

Value = Any  # int, str, bool, or a tuple of ints (a split)


def config_id(config: Mapping[str, Any]) -> str:
    """The identity of a config, `Config.id`: canonical JSON text, equal for equal configs whatever
    their key order or container types, so records of raw dicts and `Config`s agree."""
    return json.dumps(dict(config), sort_keys=True, separators=(",", ":"))


def _freeze(value: Any) -> Value:
    return tuple(int(v) for v in value) if isinstance(value, (list, tuple)) else value


def _thaw(value: Value) -> Any:
    return list(value) if isinstance(value, tuple) else value


class Config(Mapping[str, Value]):
    """Hashable and ordered by knob name, so equal configs have one identity everywhere."""

    __slots__ = ("_items", "_hash")

    def __init__(self, values: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        merged = dict(values or {}, **kwargs)
        self._items = tuple(sorted((str(k), _freeze(v)) for k, v in merged.items()))
        self._hash = hash(self._items)

    def __getitem__(self, name: str) -> Value:
        for key, value in self._items:
            if key == name:
                return value
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return (key for key, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Config):
            return self._items == other._items
        return isinstance(other, Mapping) and self._items == Config(other)._items

    def __repr__(self) -> str:
        return f"Config({dict(self._items)!r})"

    def replace(self, **changes: Any) -> "Config":
        return Config(dict(self._items, **changes))

    def to_json(self) -> dict[str, Any]:
        """A plain dict for JSON (splits become lists); `Config.from_json` inverts it exactly."""
        return {key: _thaw(value) for key, value in self._items}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Config":
        return cls(data)

    @property
    def id(self) -> str:
        """Canonical JSON text: the identity used by records to avoid measuring twice."""
        return config_id(self)
