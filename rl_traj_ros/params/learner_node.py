"""Parameters of ``learner_node`` (PPO or RLPD: ``algorithm`` picks the defaults marked ``per``)."""
from .shared import SHARED
from .spec import Param, pick

LEARNER_NODE = {
    **pick(SHARED, 'state_dim', 'action_dim', 'chunk', 'hidden', 'num_envs', 'num_env_nodes', 'gamma', 'gae_lambda',
           'num_epochs', 'chunks_per_epoch', 'num_actors', 'use_images', 'image_encoder', 'camera_names',
           'sac_action_scale', 'torch_threads', 'run_id'),
    'algorithm': Param('ppo', "'ppo' (on-policy, one update per training step) or 'rlpd' (off-policy SAC with "
                              'demonstrations in the buffer, gradient steps as fast as the data allows)'),
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
    'max_grad_norm': Param(0.5, 'gradient clipping (global norm)', (0.0, 1e6), per={'rlpd': 10.0}),
    'target_kl': Param(0.0, 'stop an update\'s epochs once approx KL > 1.5x this (0 = off)', (0.0, 10.0)),
    'normalize_advantages': Param(True, 'whiten the advantages of each update'),
    'normalize_rewards': Param(False, "ppo: divide rewards by the running std of the discounted return (what "
                                      "SB3's VecNormalize norm_reward does; the critic learns values in that "
                                      'scale); not applied to a collector\'s GAE (pipeline mode)'),
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
    'replay_buffer_dir': Param('', "the writer's buffer: catch up there on steps missed while down"),
    'catch_up_period_s': Param(2.0, 'how often to look for stored trajectories of missed steps', (0.05, 3600.0)),
    'actor_rank': Param(0, 'this learner\'s rank (with num_actors > 1)', (0, 4095)),
    'dist_backend': Param('gloo', "torch.distributed backend: 'gloo' (CPU) or 'nccl' (GPU)"),
    'dist_init': Param('tcp://127.0.0.1:29517', 'torch.distributed rendezvous of the ranks'),
    # RLPD (algorithm 'rlpd'; gamma is its discount per control step, lr each optimizer's)
    'demos_dir': Param('', 'rlpd: demonstrations (real_collect demos/, a sim expert run\'s replay_buffer/) for '
                           'the demo half of every batch; empty: interventions only'),
    'batch_size': Param(256, 'rlpd: transitions per gradient step', (1, 1 << 20)),
    'online_ratio': Param(0.5, 'rlpd: share of online rows in each batch (RLPD: 0.5)', (0.0, 1.0)),
    'utd_ratio': Param(1.0, 'rlpd: critic steps per new control step of online data, at most', (0.0, 1000.0)),
    'critic_actor_ratio': Param(2, 'rlpd: critic steps per actor step', (1, 1000)),
    'num_critics': Param(10, 'rlpd: critic ensemble size', (1, 1000)),
    'critic_subsample': Param(2, 'rlpd: target critics sampled for the min', (1, 1000)),
    'tau': Param(0.005, 'rlpd: Polyak factor of the target critics', (0.0, 1.0)),
    'init_temperature': Param(0.01, 'rlpd: initial entropy temperature alpha', (1e-8, 100.0)),
    'target_entropy': Param(float('nan'), "rlpd: target entropy; NaN (.nan in YAML): -|A|/2 over the chunk's "
                                          'action entries (any number, 0 too, is taken as it is)'),
    'backup_entropy': Param(False, 'rlpd: subtract alpha log pi in the critic target (SAC; RLPD leaves it out)'),
    'min_online_steps': Param(0, 'rlpd: online control steps before the first gradient step (image_encoder '
                                 "'keypoints': also the first rollouts' frames it pretrains on)", (0, 1 << 40)),
    'encoder_pretrain_epochs': Param(30, "rlpd, image_encoder 'keypoints': passes over the frames before RL",
                                     (1, 100000)),
    'publish_every': Param(50, 'rlpd: gradient steps between weight versions', (1, 1 << 30)),
    'publish_period_s': Param(0.0, 'rlpd: also publish after this many seconds with new steps (0 = off)',
                              (0.0, 3600.0)),
    'train_slice': Param(10, 'rlpd: gradient steps per turn of the node\'s loop (messages are handled between)',
                         (1, 100000)),
    'normalize_states': Param(True, "rlpd: standardize states (actor and critics) by the demonstrations' mean "
                              'and std, fitted once at start; they travel with the weights'),
    'prioritized_replay': Param(False, 'rlpd: draw the online half by priority (|TD error|, Schaul et al.) with '
                                       'importance weights in the critic loss; false: uniform (RLPD)'),
    'priority_alpha': Param(0.6, 'rlpd, prioritized_replay: how strongly priorities skew the draw (0: uniform)',
                            (0.0, 10.0)),
    'priority_beta': Param(0.4, 'rlpd, prioritized_replay: importance-weight correction (1: full)', (0.0, 1.0)),
    'online_window': Param(0, 'rlpd: the online buffer keeps the newest N trajectories (0 = all)', (0, 1 << 30)),
    'success_ends_episode': Param(True, "rlpd: a step whose reward reaches the success rule's (0.5, the collector's) "
                                        'ends the learner\'s episode there: terminated, no bootstrap past it. Steps a '
                                        'recording kept after a success (steps_after_success: the frames a success '
                                        'classifier learns from) are then each a terminal success, as the run\'s own '
                                        'success is, not a run of rewards the run never pays; false: the stored ends '
                                        'only (a dense reward)'),
}
