"""Each node's defaults as attributes, for code below the assembly that offers a default argument.

``def __init__(self, num_envs: int = ENV.num_envs)`` takes the env node's default from its spec:
a parameter's default is written once, in ``params/`` (``test_params_single_source.py`` fails on
a literal default of a declared parameter name anywhere else). Where an algorithm has its own
default (``Param.per``), its own namespace holds it (``RLPD.hidden``, ``SAC.hidden``).
"""
from .collector_node import COLLECTOR_NODE
from .env_node import ENV_NODE
from .learner_node import LEARNER_NODE
from .policy_node import POLICY_NODE
from .reward_training import REWARD_TRAINING
from .spec import resolve
from .teleop_nodes import GELLO_NODE, SPACEMOUSE_NODE
from .writer_node import WRITER_NODE

ENV = resolve(ENV_NODE, {})
POLICY = resolve(POLICY_NODE, {})
SAC = resolve(POLICY_NODE, {'policy': 'sac'})
COLLECTOR = resolve(COLLECTOR_NODE, {})
WRITER = resolve(WRITER_NODE, {})
LEARNER = resolve(LEARNER_NODE, {})
RLPD = resolve(LEARNER_NODE, {'algorithm': 'rlpd'})
SPACEMOUSE = resolve(SPACEMOUSE_NODE, {})
GELLO = resolve(GELLO_NODE, {})
REWARD_TRAIN = resolve(REWARD_TRAINING, {})

__all__ = ['ENV', 'POLICY', 'SAC', 'COLLECTOR', 'WRITER', 'LEARNER', 'RLPD', 'SPACEMOUSE', 'GELLO', 'REWARD_TRAIN']
