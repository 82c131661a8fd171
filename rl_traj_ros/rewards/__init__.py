"""A real cell's reward (issue #35): the operator's episode labels and a success classifier
learned from the cameras, ROS-free. ``labels``: what the operator's success / failure /
re-record means for an episode and for each of its frames; ``classifier``: the camera model and
its checkpoint; ``train``: training it on labeled episodes and measuring it on held-out ones;
``detector``: the per-step reward and termination (threshold, hold, the operator overrides)."""
