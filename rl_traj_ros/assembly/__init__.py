"""The assembly layer: parameters -> the objects of a run (``build.py``); nodes and pipelines call it."""
from .build import (POLICIES, join_learner_ranks, joint_positions, leave_learner_ranks, make_buffer,  # noqa: F401
                    make_env, make_learner, make_plan, make_policy_worker, rollout_config, sac_actor,
                    set_torch_threads)
