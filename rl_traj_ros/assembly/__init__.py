"""The assembly layer: parameters -> the objects of a run (``build.py``); nodes and pipelines call it."""
from .build import (POLICIES, joint_positions, make_buffer, make_env, make_learner, make_plan,  # noqa: F401
                    make_policy_worker, rollout_config, sac_actor, set_torch_threads)
