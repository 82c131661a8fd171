"""Parameters of ``policy_node``."""
from .shared import SHARED
from .spec import Param, pick

POLICY_NODE = {
    **pick(SHARED, 'state_dim', 'action_dim', 'chunk', 'hidden', 'image_size', 'collect_transitions', 'use_images',
           'sac_action_scale',
           'resend_after_s'),
    'policy': Param('expert', "'expert' (scripted pick-cube), 'mlp' (sample the PPO actor-critic), 'sac' (sample "
                              "the RLPD learner's squashed-Gaussian actor) or 'zero' (hold still: demonstrations "
                              'driven by teleop)'),
    'weights': Param('', 'state_dict file (loaded with weights_only=True); empty: seeded init'),
    'seed': Param(0, 'model init and per-key sampling seed'),
    'device': Param('cpu', "'cpu' or 'cuda'"),
    'model_version': Param(0, 'version stamped on every PolicyPart'),
    'expert_noise': Param(0.0, 'std of Gaussian noise on the expert (diversity)', (0.0, 10.0)),
    'max_unacked_keys': Param(2000, 'backpressure: stop answering new requests while more keys are unacked',
                              (1, 1 << 24)),
    'max_version_lag': Param(-1, 'answer a request of step s only with the weights of update >= s - lag '
                                 '(0: synchronous PPO); -1: never wait for weights', (-1, 1 << 30)),
}
