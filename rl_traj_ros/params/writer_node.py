"""Parameters of ``replay_buffer_writer_node``."""
from .shared import SHARED, STOP_DEADLINE
from .spec import Param, pick

WRITER_NODE = {
    **pick(SHARED, 'diagnostics_period_s'),
    'output_dir': Param('outputs/replay_buffer', 'auto-save directory (appends if it exists)'),
    'trajectory_format': Param('pt', "'pt' (safe loading) or 'pkl' (trusted data only)"),
    'cache_size': Param(5, 'FIFO cache of recent trajectories', (0, 100000)),
    'sample_window_size': Param(100, 'sampling window (0 = all)', (0, 1 << 30)),
    'seed': Param(1234, 'sampling seed'),
    'max_pending_writes': Param(4, 'writer queue bound (backpressure)', (1, 100000)),
    'dedupe_window': Param(1024, 'newest trajectory identities kept in memory to detect re-deliveries '
                                 '(the index on disk keeps all)', (1, 1 << 24)),
    'stop_deadline_s': Param(3.5, STOP_DEADLINE, (0.1, 4.9)),
}
