"""The assembly layer: parameters -> the objects of a run (``build.py``); nodes and pipelines call it."""
from .build import (POLICIES, make_buffer, make_learner, make_plan, make_policy_worker, rollout_config,  # noqa: F401
                    sac_actor)
