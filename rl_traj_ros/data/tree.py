"""Batch-dimension operations on nested observation/forward-input dicts.

Observations mix tensors (``main_images [B,H,W,3]``), nested dicts and per-env string lists
(``task_descriptions``). Routing splits and merges those along the env dim, and the collector
stacks them along time; one set of helpers keeps every part type consistent.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import torch

Tree = Any  # torch.Tensor | list[str] | Mapping[str, Tree]


def tree_map(fn: Callable[[Any], Any], tree: Tree) -> Tree:
    if isinstance(tree, Mapping):
        return {k: tree_map(fn, v) for k, v in tree.items()}
    return fn(tree)


def batch_size(tree: Tree, path: str = '') -> int | None:
    """Size of dim 0 shared by every leaf; a mismatch is an error naming the field."""
    sizes: dict[str, int] = {}

    def visit(node: Tree, p: str) -> None:
        if isinstance(node, Mapping):
            for k, v in node.items():
                visit(v, f'{p}/{k}' if p else str(k))
        elif isinstance(node, torch.Tensor):
            if node.dim() == 0:
                raise ValueError(f'field {p!r} is 0-d; batched fields need an env dim')
            sizes[p] = node.shape[0]
        elif isinstance(node, (list, tuple)):
            sizes[p] = len(node)
        elif node is not None:
            raise TypeError(f'field {p!r} has unsupported type {type(node).__name__}')

    visit(tree, path)
    distinct = set(sizes.values())
    if len(distinct) > 1:
        raise ValueError(f'inconsistent batch sizes in {path or "tree"}: {sizes}')
    return distinct.pop() if distinct else None


def tree_slice(tree: Tree, start: int, stop: int) -> Tree:
    return tree_map(lambda x: x[start:stop] if x is not None else None, tree)


def tree_cat(trees: Sequence[Tree], dim: int = 0) -> Tree:
    first = trees[0]
    if isinstance(first, Mapping):
        keys = list(first.keys())
        for t in trees[1:]:
            if list(t.keys()) != keys:
                raise ValueError(f'cannot concatenate dicts with different keys: {keys} vs {list(t.keys())}')
        return {k: tree_cat([t[k] for t in trees], dim) for k in keys}
    if isinstance(first, torch.Tensor):
        return torch.cat(list(trees), dim=dim)
    if isinstance(first, (list, tuple)):
        if dim == 1:  # time-stacked string lists: [T][B] -> concatenate the env rows
            return [[s for t in trees for s in t[i]] for i in range(len(first))]
        return [s for t in trees for s in t]
    if first is None:
        return None
    raise TypeError(f'cannot concatenate {type(first).__name__}')


def tree_stack(trees: Sequence[Tree], dim: int = 0) -> Tree:
    first = trees[0]
    if isinstance(first, Mapping):
        return {k: tree_stack([t[k] for t in trees], dim) for k in first.keys()}
    if isinstance(first, torch.Tensor):
        return torch.stack(list(trees), dim=dim)
    if isinstance(first, (list, tuple)):
        return [list(t) for t in trees]
    return None


def tree_equal(a: Tree, b: Tree) -> bool:
    if isinstance(a, Mapping) or isinstance(b, Mapping):
        return (isinstance(a, Mapping) and isinstance(b, Mapping) and set(a.keys()) == set(b.keys())
                and all(tree_equal(a[k], b[k]) for k in a))
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype
                and a.shape == b.shape and bool(torch.equal(a, b)))
    return a == b
