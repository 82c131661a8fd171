"""The layer rule, checked: each folder of the package imports only from folders below it.

A newcomer reads the layers off the folder names; this test keeps them true (function-level
imports included) and finds import cycles between modules."""
import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / 'rl_traj_ros'
# bottom to top; a module may import its own folder and any folder listed before it
LAYERS = ['params', 'data', 'storage', 'delivery', 'episodes', 'policies', 'rewards', 'learning', 'collect', 'envs',
          'teleop', 'rollout', 'assembly', ('msg', 'srv', 'ros'), 'nodes', 'viz', 'pipelines', 'cli']
RANK = {name: i for i, layer in enumerate(LAYERS) for name in ((layer,) if isinstance(layer, str) else layer)}


def module_of(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix('')
    parts = list(rel.parts)
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of every import of the package in ``path``, at any depth."""
    me = module_of(path).split('.')
    base = me if path.name == '__init__.py' else me[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                mod = '.'.join(base[:len(base) - node.level + 1] + ([node.module] if node.module else []))
            else:
                mod = node.module or ''
            if mod == 'rl_traj_ros' or mod.startswith('rl_traj_ros.'):
                # `from pkg import module` imports that module; `from module import name` the module
                out += [(node.lineno, f'{mod}.{a.name}' if is_module(f'{mod}.{a.name}') else mod) for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.startswith('rl_traj_ros.')]
    return out


def is_module(name: str) -> bool:
    path = PKG.parent.joinpath(*name.split('.'))
    return path.with_suffix('.py').is_file() or (path / '__init__.py').is_file() or name.endswith(('.msg', '.srv'))


def layer(module: str) -> str:
    parts = module.split('.')
    return parts[1] if len(parts) > 1 else ''


def test_every_folder_is_a_known_layer():
    folders = {p.name for p in PKG.iterdir() if p.is_dir() and not p.name.startswith('_')}
    modules = {p.stem for p in PKG.glob('*.py') if p.stem != '__init__'}
    assert (folders | modules) - {'msg', 'srv'} <= set(RANK), sorted((folders | modules) - set(RANK))


def test_imports_go_downward_only():
    wrong = []
    for path in sorted(PKG.rglob('*.py')):
        src = layer(module_of(path))
        if src not in RANK:  # the package's __init__
            continue
        for line, mod in imports(path):
            dst = layer(mod)
            if dst and RANK[dst] > RANK[src]:
                wrong.append(f'{path.relative_to(PKG.parent)}:{line} ({src}) imports {mod} ({dst})')
    assert not wrong, 'imports that go up a layer:\n' + '\n'.join(wrong)


def test_no_import_cycles_between_modules():
    graph: dict[str, set[str]] = {}
    for path in PKG.rglob('*.py'):
        graph[module_of(path)] = {m for _, m in imports(path)}
    state: dict[str, int] = {}
    cycles = []

    def visit(m, stack):
        state[m] = 1
        for n in sorted(graph.get(m, ())):
            if n not in graph:
                continue
            if state.get(n) == 1:
                cycles.append(' -> '.join(stack[stack.index(n):] + [n]))
            elif n not in state:
                visit(n, stack + [n])
        state[m] = 2
    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, cycles
