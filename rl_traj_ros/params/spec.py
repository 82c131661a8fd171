"""One source per default: every node parameter as a ``Param`` (default, description, range).

Nodes declare their parameters from these specs (``nodes.common.declare``: read-only, with
the range as a ROS descriptor, so ``ros2 param describe`` shows it and an out-of-range value
stops the node at start-up, named); the in-process factories fill a YAML's node section with
the same defaults (``resolve``). YAML and launch files only override. A name means the same
thing in every node that declares it: shared parameters live once in ``shared.py``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional


@dataclass(frozen=True)
class Param:
    default: Any
    description: str
    range: Optional[tuple[float, float]] = None   # inclusive; numbers only
    read_only: bool = True                        # nodes read their parameters once, at start-up

    def check(self, name: str, value: Any) -> None:
        """Refuse a value outside the range, naming the parameter (as rclpy would)."""
        if self.range is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            return
        lo, hi = self.range
        if not lo <= value <= hi:
            raise ValueError(f'parameter {name!r} = {value} is outside its range [{lo}, {hi}]')


Spec = Mapping[str, Param]


def defaults(spec: Spec) -> dict[str, Any]:
    return {name: p.default for name, p in spec.items()}


def resolve(spec: Spec, given: Mapping[str, Any]) -> dict[str, Any]:
    """A node's effective parameters from a YAML section: the spec's defaults, overridden by
    ``given`` (range-checked); names the spec does not know are kept (a '/**' section is shared
    by every node kind)."""
    out = {**defaults(spec), **given}
    for name, p in spec.items():
        p.check(name, out[name])
    return out


def pick(spec: Spec, *names: str) -> dict[str, Param]:
    return {n: spec[n] for n in names}


__all__ = ['Param', 'Spec', 'defaults', 'resolve', 'pick']
