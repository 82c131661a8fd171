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


def resolve(spec: Spec, given: Mapping[str, Any]) -> dict[str, Any]:
    """A node's effective parameters from a YAML section: the spec's defaults (those of the given
    algorithm or policy), overridden by ``given`` (range-checked); names the spec does not know
    are kept (a '/**' section is shared by every node kind)."""
    out = {**defaults(spec, given), **given}
    for name, p in spec.items():
        p.check(name, out[name])
    return out


def pick(spec: Spec, *names: str) -> dict[str, Param]:
    return {n: spec[n] for n in names}


__all__ = ['Param', 'Spec', 'SELECTORS', 'defaults', 'resolve', 'pick', 'selected']
