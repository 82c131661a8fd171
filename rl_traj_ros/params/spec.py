"""One source per default: every node parameter as a ``Param`` (default, description, range).

Nodes declare their parameters from these specs (``nodes.common.declare``: read-only, with
the range as a ROS descriptor, so ``ros2 param describe`` shows it and an out-of-range value
stops the node at start-up, named); the in-process factories fill a YAML's node section with
the same defaults (``resolve``). YAML and launch files only override. A name means the same
thing in every node that declares it: shared parameters live once in ``shared.py``.

A default that belongs to one algorithm sits beside the general one (``per``): the learner's
``algorithm`` and the policy node's ``policy`` select it (RLPD's discount, gradient clip and
width are not PPO's), in ``declare`` and in ``resolve`` alike, so ``ros2 run ... learner_node
--ros-args -p algorithm:=rlpd`` gets RLPD's values without a YAML.
"""
from __future__ import annotations

import math
from array import array
from dataclasses import dataclass
from typing import Any, Mapping, Optional

SELECTORS = ('algorithm', 'policy', 'env_type')  # the parameters whose value picks a ``Param.per`` default


@dataclass(frozen=True)
class Param:
    default: Any
    description: str
    range: Optional[tuple[float, float]] = None   # inclusive; numbers only
    read_only: bool = True                        # nodes read their parameters once, at start-up
    per: Optional[Mapping[str, Any]] = None       # {algorithm or policy: its own default}

    def default_for(self, selected: Optional[str]) -> Any:
        return (self.per or {}).get(selected, self.default)

    def describe(self) -> str:
        if not self.per:
            return self.description
        return self.description + ' (default ' + ', '.join(f'{v!r} for {k}' for k, v in self.per.items()) + \
            f', else {self.default!r})'

    def check(self, name: str, value: Any) -> None:
        """Refuse a value outside the range, naming the parameter (as rclpy would)."""
        if self.range is None or isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            return
        lo, hi = self.range
        if not lo <= value <= hi:
            raise ValueError(f'parameter {name!r} = {value} is outside its range [{lo}, {hi}]')


Spec = Mapping[str, Param]


def selected(spec: Spec, given: Mapping[str, Any]) -> Optional[str]:
    """The algorithm (or policy) that picks the ``per`` defaults: given, else the spec's default."""
    for name in SELECTORS:
        if name in spec:
            return given.get(name, spec[name].default)
    return None


def defaults(spec: Spec, given: Mapping[str, Any] = {}) -> dict[str, Any]:  # noqa: B006 - read only
    choice = selected(spec, given)
    return {name: p.default_for(choice) for name, p in spec.items()}


def typed(name: str, p: Param, value: Any) -> Any:
    """``value`` as the type of the parameter's default (an int is a float where a float is
    declared, as a YAML ``1`` for ``1.0``), else a ValueError naming the parameter."""
    want = type(p.default)
    if want is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if want is list and isinstance(value, (list, tuple, array)):  # rclpy gives number arrays as array.array
        item = type(p.default[0]) if p.default else None
        return [typed(f'{name}[{i}]', Param(item(), ''), v) if item else v for i, v in enumerate(value)]
    if type(value) is not want:
        raise ValueError(f'parameter {name!r} must be {want.__name__} (its default is {p.default!r}), '
                         f'got {type(value).__name__} {value!r}')
    return value


def _copy(value: Any) -> Any:
    """A list parameter reads as a fresh list: what a caller does with it never changes the config."""
    return list(value) if isinstance(value, list) else value


class Config(Mapping):
    """A node's effective parameters, typed and frozen: ``cfg.lr`` or ``cfg['lr']``.

    Every parameter of the spec is a field of the type of its default (``typed``), in range
    (``Param.check``); ``replace`` gives a changed copy. Names the spec does not declare (a
    '/**' section is shared by every node kind) are readable by key only."""
    __slots__ = ('_spec', '_values', '_extra')

    def __init__(self, spec: Spec, values: Mapping[str, Any]):
        own = {}
        for name, p in spec.items():
            own[name] = typed(name, p, values[name])
            p.check(name, own[name])
        object.__setattr__(self, '_spec', spec)
        object.__setattr__(self, '_values', own)
        object.__setattr__(self, '_extra', {k: v for k, v in values.items() if k not in spec})

    def __getattr__(self, name: str) -> Any:
        try:
            return _copy(object.__getattribute__(self, '_values')[name])
        except KeyError:
            raise AttributeError(f'no parameter {name!r}') from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f'parameters are read-only: {name!r} (use replace)')

    def __getitem__(self, name: str) -> Any:
        return _copy(self._values[name]) if name in self._values else self._extra[name]

    def __iter__(self):
        return iter({**self._values, **self._extra})

    def __len__(self) -> int:
        return len(self._values) + len(self._extra)

    def __reduce__(self):   # copy and pickle through __init__ (the attributes are read-only)
        return Config, (self._spec, dict(self))

    def replace(self, **changes: Any) -> 'Config':
        return Config(self._spec, {**self, **changes})

    def __repr__(self) -> str:
        return f'Config({dict(self)!r})'


def resolve(spec: Spec, given: Mapping[str, Any]) -> Config:
    """A node's effective parameters from a YAML section: the spec's defaults (those of the given
    algorithm or policy), overridden by ``given`` (typed, range-checked); names the spec does not
    know are kept (a '/**' section is shared by every node kind)."""
    return Config(spec, {**defaults(spec, given), **given})


def pick(spec: Spec, *names: str) -> dict[str, Param]:
    return {n: spec[n] for n in names}


__all__ = ['Config', 'Param', 'Spec', 'SELECTORS', 'defaults', 'resolve', 'pick', 'selected', 'typed']
