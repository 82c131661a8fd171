"""Parameters that several nodes declare: one meaning, one default, one range."""
from .spec import Param

GAMMA = 0.99        # the discount every config and factory defaults to (PPO's)
RLPD_GAMMA = 0.97   # RLPD's, per control step
GAE_LAMBDA = 0.95
# One meaning, a default per node (each node's spec): env < policy < collector < writer, so that
# downstream outlasts upstream, all below launch's SIGTERM at 5 s (delivery/stop.py).
STOP_DEADLINE = ("after a stop signal (Ctrl-C, launch's SIGINT): the most seconds this node keeps serving while "
                 'the nodes upstream of it are there and what it sent is not acknowledged')

SHARED = {
    'topic_prefix': Param('/rl_traj', 'namespace of the data-path topics'),
    'run_id': Param('', "this run's id, shared by its nodes: every data-path message carries it and a node drops "
                        "(counts as foreign) another run's; the collector names its TrajectoryIds with it and the "
                        "learner trains on its trajectories. The runner and the launch files make one per run; "
                        'empty: a node started alone talks only to nodes without one (the collector then names '
                        'its TrajectoryIds by its start time)'),
    'secret_file': Param('', "the run's secret (hex, readable by its owner only): commands (ActionChunk, "
                             'Intervention, PolicyWeights) are signed with HMAC-SHA256 under it and checked; the '
                             'runner and the launch files make one per run; empty: unsigned'),
    'num_envs': Param(2, 'B: parallel envs per env node (franky: one robot)', (1, 4096), per={'franky': 1}),
    'num_env_nodes': Param(1, 'env nodes of the run (a step holds num_envs x num_env_nodes env rows)',
                           (1, 4096)),
    'chunk': Param(4, 'C: control steps per action chunk', (1, 1024)),
    'action_dim': Param(7, 'A: actions per control step ([dx, dy, dz, drx, dry, drz, gripper])', (1, 64)),
    'num_epochs': Param(1, 'E: rollout epochs per training step', (1, 1024)),
    'chunks_per_epoch': Param(10, 'L: chunks per epoch', (1, 100000)),
    'gamma': Param(GAMMA, 'discount', (0.0, 1.0), per={'rlpd': RLPD_GAMMA}),
    'gae_lambda': Param(GAE_LAMBDA, 'GAE lambda', (0.0, 1.0)),
    'state_dim': Param(21, 'length of obs/states', (1, 1 << 20)),
    'hidden': Param(128, "hidden width of the MLPs (PPO's actor-critic; RLPD's actor and critics)", (1, 1 << 16),
                    per={'rlpd': 256, 'sac': 256}),
    'image_size': Param(128, 'camera height and width', (16, 4096)),
    'resend_after_s': Param(30.0, 'resend what the consumer has not acknowledged after this long', (0.1, 86400.0)),
    'diagnostics_period_s': Param(1.0, 'progress on /diagnostics every this many seconds (0 = only at exit)',
                                  (0.0, 3600.0)),
    'num_actors': Param(1, 'pipeline: actor ranks', (1, 4096)),
    'sac_action_scale': Param([1.0], "policy 'sac' / algorithm 'rlpd': the actor's action range per action "
                                     'dimension (env units: m per control step, 1 for a gripper command); one '
                                     'value: every dimension'),
    'use_images': Param(False, 'the RLPD actor and critics (and PPO\'s actor-critic) see the cameras too'),
    'image_encoder': Param('cnn', "use_images, policy 'sac' / algorithm 'rlpd': 'cnn' (a small CNN over "
                                  'main_images trained end to end, DrQ shifts) or \'keypoints\' (spatial-softmax '
                                  'keypoints of every camera, pretrained self-supervised on the demos\' and first '
                                  'rollouts\' frames, then frozen: features computed once per frame)'),
    'camera_names': Param(['front', 'wrist'], 'camera names, main camera first: the dataset\'s '
                                              'observation.images.<camera> keys (lerobot naming)'),
    'torch_threads': Param(0, 'torch intra-op threads of this node (policy \'lerobot\': of its LeRobot process too; 0: '
                              'the cores less one, at least 1); torch\'s '
                              'default, every core, spins its threads against the env and the other nodes on '
                              'the same cores', (0, 4096)),
    'collect_transitions': Param(False, 'keep curr_obs/next_obs (whole transitions) in the parts and trajectories'),
}
