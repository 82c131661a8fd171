"""Parameters of ``policy_node``."""
from .shared import SHARED, STOP_DEADLINE
from .spec import Param, pick

POLICY_NODE = {
    **pick(SHARED, 'state_dim', 'action_dim', 'chunk', 'hidden', 'image_size', 'collect_transitions', 'use_images',
           'image_encoder', 'sac_action_scale', 'camera_names', 'torch_threads',
           'resend_after_s'),
    'policy': Param('expert', "'expert' (scripted pick-cube), 'mlp' (sample the PPO actor-critic), 'sac' (sample "
                              "the RLPD learner's squashed-Gaussian actor), 'zero' (hold still: demonstrations "
                              "driven by teleop) or 'lerobot' (a lerobot-train checkpoint: ACT, diffusion, ...)"),
    'checkpoint': Param('', "policy 'lerobot': lerobot-train's .../checkpoints/<N>/pretrained_model (config.json, "
                            'model.safetensors and the processors with their normalization statistics)'),
    'lerobot_python': Param('', "policy 'lerobot': the LeRobot 0.6.1 interpreter (Python >= 3.12) that runs the "
                                'checkpoint; empty: $RL_TRAJ_ROS_LEROBOT_PYTHON, else the venv of '
                                'tools/lerobot_venv.sh'),
    'temporal_ensemble_coeff': Param(-1.0, "policy 'lerobot': ACT's temporal ensembling over the chunks predicted "
                                           'for a row, weight exp(-coeff i) oldest first (ACT: 0.01); < 0: off, each '
                                           'chunk is the first C actions of one prediction', (-1.0, 100.0)),
    'weights': Param('', 'state_dict file (loaded with weights_only=True); empty: seeded init'),
    'seed': Param(0, 'model init and per-key sampling seed'),
    'device': Param('cpu', "'cpu' or 'cuda'"),
    'model_version': Param(0, 'version stamped on every PolicyPart'),
    'expert_noise': Param(0.0, 'std of Gaussian noise on the expert (diversity)', (0.0, 10.0)),
    'max_unacked_keys': Param(2000, 'backpressure: stop answering new requests while more keys are unacked',
                              (1, 1 << 24)),
    'max_version_lag': Param(-1, 'answer a request of step s only with the weights of update >= s - lag '
                                 '(0: synchronous PPO); -1: never wait for weights', (-1, 1 << 30)),
    'stop_deadline_s': Param(2.5, STOP_DEADLINE, (0.1, 4.9)),
}
