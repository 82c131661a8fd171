"""One source per default: a declared parameter's default is written in ``params/`` and nowhere else.

Outside ``params/`` a function argument or dataclass field named like a declared parameter takes
its default from the spec (``params.defaults``: ``ENV.num_envs``), or has none, or ``None`` ("not
given: the caller's or the spec's"); a literal there would be a second default that drifts from
the first (the learner once trained RLPD with PPO's discount that way). The same holds for
``mapping.get(name, literal)`` on a node's parameters outside the pipelines' readers of their
own YAML files. The few exceptions are named below, each with its reason."""
import ast
import importlib
import pkgutil
from pathlib import Path

import rl_traj_ros.params as params_pkg
from rl_traj_ros.params.spec import Param

PKG = Path(__file__).resolve().parent.parent / 'rl_traj_ros'
# (file, class or function): the spec's own record types, whose defaults the spec documents define
# (TrajectoryId's -1 means "not one env", not an env node's rank), and the smoke test's synthetic shape
EXEMPT = {('data/identity.py', 'TrajectoryId'), ('data/schema.py', 'RewardConfig'),
          ('data/synthetic.py', 'SyntheticSpec')}
# the pipelines read their own YAML files (real_collect.yaml's data_collection section, ...), not a node's
GET_EXEMPT_DIRS = {'pipelines'}


def declared() -> set[str]:
    names = set()
    for m in pkgutil.iter_modules(params_pkg.__path__):
        for v in vars(importlib.import_module(f'rl_traj_ros.params.{m.name}')).values():
            if isinstance(v, dict) and v and all(isinstance(p, Param) for p in v.values()):
                names |= set(v)
    return names


def literal(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value is not None
    if isinstance(node, ast.UnaryOp):
        return isinstance(node.operand, ast.Constant)
    if isinstance(node, (ast.List, ast.Tuple)):
        return all(literal(e) for e in node.elts)
    return False


def literal_defaults(path: Path, names: set[str], rel: str = '') -> list[str]:
    rel = rel or str(path.relative_to(PKG))
    found = []

    def scan(node, owner):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (rel, node.name) not in EXEMPT:
            a = node.args
            pos = a.posonlyargs + a.args
            pairs = list(zip(pos[len(pos) - len(a.defaults):], a.defaults)) + \
                [(x, d) for x, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
            found.extend(f'{rel}:{d.lineno} {node.name}({x.arg}={ast.unparse(d)})' for x, d in pairs
                         if x.arg in names and literal(d))
        if isinstance(node, ast.ClassDef) and (rel, node.name) not in EXEMPT:
            found.extend(f'{rel}:{s.lineno} {node.name}.{s.target.id} = {ast.unparse(s.value)}' for s in node.body
                         if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) and s.value is not None
                         and s.target.id in names and literal(s.value))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == 'get' \
                and len(node.args) == 2 and isinstance(node.args[0], ast.Constant) and node.args[0].value in names \
                and literal(node.args[1]) and Path(rel).parts[0] not in GET_EXEMPT_DIRS:
            found.append(f'{rel}:{node.lineno} .get({ast.unparse(node.args[0])}, {ast.unparse(node.args[1])})')
        for child in ast.iter_child_nodes(node):
            scan(child, owner)

    scan(ast.parse(path.read_text()), None)
    return found


def test_no_literal_default_of_a_declared_parameter_outside_params():
    names = declared()
    assert {'gamma', 'num_envs', 'seed', 'hidden'} <= names   # the scan knows the specs
    found = [hit for path in sorted(PKG.rglob('*.py')) if 'params' not in path.relative_to(PKG).parts
             for hit in literal_defaults(path, names)]
    assert not found, 'defaults written outside params/ (take them from params.defaults):\n' + '\n'.join(found)


def test_the_scan_finds_a_literal_default(tmp_path):
    """The rule can fail: a second default in a function, a field or a ``.get`` is found."""
    probe = tmp_path / 'probe.py'
    probe.write_text('from dataclasses import dataclass\n\n\ndef f(num_envs=3, seed=None):\n    return {}.get("gamma", '
                     '0.9)\n\n\n@dataclass\nclass C:\n    hidden: int = 64\n')
    hits = literal_defaults(probe, declared(), rel='envs/probe.py')
    assert [h.split(' ', 1)[1] for h in hits] == ['f(num_envs=3)', ".get('gamma', 0.9)", 'C.hidden = 64']


# -- a parameter's route: CLI -> its node -> the assembly -> where it is used, at most 4 files ----
NODE_SPECS = {'franka_env_node': 'env_node.ENV_NODE', 'policy_node': 'policy_node.POLICY_NODE',
              'learner_node': 'learner_node.LEARNER_NODE', 'trajectory_collector_node': 'collector_node.COLLECTOR_NODE',
              'replay_buffer_writer_node': 'writer_node.WRITER_NODE', 'gello_teleop_node': 'teleop_nodes.GELLO_NODE',
              'spacemouse_teleop_node': 'teleop_nodes.SPACEMOUSE_NODE'}
# the readers that take a node's parameters as a whole in the layer that uses them (each called
# from the node or the assembly): the third file of a route, the use being the third or fourth
READERS = ('rollout/workers.py',            # RolloutConfig: the env node's rollout fields
           'envs/sim_franka.py',            # sim_env_from_params: the sim env and its state ids
           'ros/images.py',                 # CameraSubscriber.from_params: the camera topics
           'episodes/collect_episode.py',   # collect_episode_kwargs: the recorder
           'learning/loop.py',              # RunFiles: the learner's metrics and checkpoints
           'ros/run_link.py')               # RunLink: every node's run id, secret file, require_signed


def named(name: str, text: str) -> bool:
    """Read by name: a key, an attribute, a field or a keyword argument."""
    import re
    return re.search(rf"'{name}'|\.{name}\b|^\s*{name}\s*:|\b{name}=", text, re.M) is not None


def test_every_parameter_is_read_by_its_node_the_assembly_or_one_named_reader():
    """A newcomer follows any parameter from the command line to its use through at most 4 files:
    the node that declares it, ``assembly/build.py``, one of the READERS, the code that uses it.
    Fails when a parameter is read only deeper (a route this test does not know)."""
    build = (PKG / 'assembly' / 'build.py').read_text()
    readers = {r: (PKG / r).read_text() for r in READERS}
    deep = []
    for node, spec in NODE_SPECS.items():
        module, attr = spec.split('.')
        names = getattr(importlib.import_module(f'rl_traj_ros.params.{module}'), attr)
        src = (PKG / 'nodes' / f'{node}.py').read_text()
        for n in names:
            if named(n, src) or named(n, build):
                continue
            # read by a reader that the node or the assembly imports (the module or its package)
            reached = [r for r, text in readers.items() if named(n, text) and any(
                f'..{m} import' in src or f'..{m} import' in build
                for m in (r[:-3].replace('/', '.'), r.split('/')[0]))]
            if not reached:
                deep.append(f'{node}.{n}')
    assert not deep, 'parameters read past the assembly and its readers:\n' + '\n'.join(deep)
    assert named('gamma', "RLPDConfig(gamma=p['gamma'])") and not named('gamma', 'gamma_x = 1')
