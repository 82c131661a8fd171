"""The operator's episode labels reaching an env node: the ``episode_event`` topic (EpisodeEvent:
a teleop device's chord, pedal or key) and the ``~/episode_event`` service (LabelEpisode: any
ROS tool; ``python -m rl_traj_ros.pipelines.episode_event`` is the client).

Both are commands that change what the robot does next (an episode ends, the arm goes home), so
both pass the run's guard like an ActionChunk: another run's label is dropped and counted
(``foreign``); with ``require_signed`` (a real robot) an unsigned or wrongly signed one is refused
(``unsigned`` / ``forged``). What passes goes to ``rewards.events.EpisodeLabels``, which refuses a
label while no episode runs, for an env the node does not have, or a replayed one, saying why.
"""
from __future__ import annotations

from ..rewards.events import EpisodeLabels
from .run_link import RunLink, canonical


def serve_episode_events(node, link: RunLink, num_envs: int, running, topic: str, qos) -> EpisodeLabels:
    """The node's ``EpisodeLabels`` (``running()``: an episode runs), fed by the topic and the service."""
    from .. import msg as M
    from .. import srv as S
    log = node.get_logger()
    labels = EpisodeLabels(num_envs, running, lambda: node.get_clock().now().nanoseconds)

    def on_event(m) -> None:
        stamp_ns = m.header.stamp.sec * 10**9 + m.header.stamp.nanosec
        why = labels.offer(int(m.label), int(m.env_index), stamp_ns, m.source_device or 'a device')
        if why:
            log.warning(why)
        else:
            log.info(f'episode label {m.label} for env {m.env_index} from {m.source_device or "a device"}')
    link.subscription(M.EpisodeEvent, topic, on_event, qos)

    def on_request(request, response):
        if not link.guard.admit('~/episode_event', request.run_id, bytes(request.auth), lambda: canonical(request)):
            response.message = f'not a label of run {link.run_id!r} (foreign, unsigned or forged: see the node\'s log)'
        else:
            response.message = labels.offer(request.label, request.env_index, request.stamp_ns, 'service') or ''
            response.success = not response.message
            response.message = response.message or f'{request.label}: taken for env {request.env_index}'
        if response.success:   # two call sites: rclpy refuses one log call site with two severities
            log.info(f'~/episode_event: {response.message}')
        else:
            log.warning(f'~/episode_event: {response.message}')
        return response
    node.create_service(S.LabelEpisode, '~/episode_event', on_request)
    return labels


__all__ = ['serve_episode_events']
