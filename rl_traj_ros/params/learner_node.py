"""Parameters of ``learner_node`` (PPO)."""
from .shared import SHARED
from .spec import Param, pick

LEARNER_NODE = {
    **pick(SHARED, 'state_dim', 'action_dim', 'chunk', 'hidden', 'num_envs', 'num_env_nodes', 'gamma', 'gae_lambda',
           'num_epochs', 'chunks_per_epoch', 'num_actors'),
    'seed': Param(0, 'model init seed (the policy node\'s, so version 0 is the same model)'),
    'advantage': Param('gae', "'gae' or 'reinforce++'"),
    'auto_reset': Param(True, 'the envs auto-reset (every slot is a step); '
                              'false: mask after the first done'),
    'max_version_lag': Param(-1, 'mask out rows rolled out by weights older than version - lag; '
                                 '-1: keep all', (-1, 1 << 30)),
    'lr': Param(3e-4, 'Adam learning rate', (0.0, 1.0)),
    'ppo_epochs': Param(4, 'epochs over each step\'s samples', (1, 1000)),
    'minibatch_size': Param(64, 'samples per gradient step', (1, 1 << 24)),
    'clip_ratio': Param(0.2, 'PPO clip', (0.0, 1.0)),
    'value_clip': Param(0.2, 'value clip (<= 0: unclipped value loss)', (0.0, 1000.0)),
    'entropy_coef': Param(0.0, 'entropy bonus', (0.0, 10.0)),
    'value_coef': Param(0.5, 'value loss weight', (0.0, 100.0)),
    'max_grad_norm': Param(0.5, 'gradient clipping', (0.0, 1e6)),
    'target_kl': Param(0.0, 'stop an update\'s epochs once approx KL > 1.5x this (0 = off)', (0.0, 10.0)),
    'normalize_advantages': Param(True, 'whiten the advantages of each update'),
    'critic_warmup': Param(0, 'the first N updates train the critic only (a warm-started actor '
                              'waits for a critic that knows its returns)', (0, 1 << 30)),
    'inline_max_bytes': Param(8 << 20, 'weights up to this size travel in the message; larger as a file', (0, 1 << 31)),
    'weights_dir': Param('', 'where larger weights are written (shared with the policy node)'),
    'metrics_dir': Param('', 'metrics.jsonl goes here (empty: not written)'),
    'num_updates': Param(0, 'stop after this many updates (0 = run until stopped)', (0, 1 << 40)),
    'checkpoint_dir': Param('', 'learner_checkpoint.pt (model, optimizer, version, trained steps) goes here'),
    'checkpoint_every': Param(1, 'save every this many updates (0 = only at shutdown)'),
    'resume': Param(True, 'continue from checkpoint_dir\'s checkpoint when there is one'),
    'tensorboard_dir': Param('', 'TensorBoard event files (SummaryWriter) go here (empty: none)'),
    'snapshot_every': Param(0, 'also keep the weights of every N-th version as weights_dir/policy_v<N>.pt '
                               '(learning curves against held-out evaluation; 0 = off)', (0, 1 << 30)),
    'warm_start_dataset': Param('', 'behaviour-clone the actor on the LeRobot datasets under this directory before '
                                    'the first update (a fresh learner only); the clone goes out as version 1'),
    'warm_start_epochs': Param(100, 'epochs of behaviour cloning', (0, 100000)),
    'run_id': Param('', "train only on this run's trajectories (empty: any run's)"),
    'replay_buffer_dir': Param('', "the writer's buffer: catch up there on steps missed while down"),
    'catch_up_period_s': Param(2.0, 'how often to look for stored trajectories of missed steps', (0.05, 3600.0)),
    'actor_rank': Param(0, 'this learner\'s rank (with num_actors > 1)', (0, 4095)),
    'dist_backend': Param('gloo', "torch.distributed backend: 'gloo' (CPU) or 'nccl' (GPU)"),
    'dist_init': Param('tcp://127.0.0.1:29517', 'torch.distributed rendezvous of the ranks'),
}
