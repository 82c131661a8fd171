"""Parameters of ``trajectory_collector_node``."""
from .shared import SHARED, STOP_DEADLINE
from .spec import Param, pick

COLLECTOR_NODE = {
    **pick(SHARED, 'num_epochs', 'chunks_per_epoch', 'num_envs', 'num_actors', 'gamma', 'gae_lambda',
           'collect_transitions', 'diagnostics_period_s', 'resend_after_s', 'run_id'),
    'mode': Param('rollout', "'rollout', 'pipeline' or 'lerobot'"),
    'env_ranks': Param([0], 'env ranks of the sources (stage 0 each)'),
    'num_shards': Param(1, 'rollout: split each Trajectory along envs', (1, 4096)),
    'micro_batch_size': Param(0, 'pipeline: env rows per micro-batch (0 = all)', (0, 1 << 20)),
    'shuffle_micro_batches': Param(False, 'pipeline'),
    'normalize_advantages': Param(False, 'pipeline'),
    'seed': Param(0, 'micro-batch shuffling seed'),
    'only_success': Param(False, 'lerobot'),
    'success_reward': Param(0.5, 'lerobot: an episode succeeded if a reward reached this'),
    'auto_reset': Param(True, 'add gamma * bootstrap value on truncated chunks'),
    'pending_timeout_s': Param(120.0, 'drop and report a part whose other half did not come in time', (0.1, 86400.0)),
    'stats_period_s': Param(5.0, 'period of the counters log line; 0 = off'),
    'stop_deadline_s': Param(3.0, STOP_DEADLINE, (0.1, 4.9)),
}
