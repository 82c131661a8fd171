"""Episode recording (spec data-collection): the CollectEpisode wrapper and its writers."""
from .collect_episode import CollectEpisode, EpisodeRecord, collect_episode_kwargs, infer_success
from .lerobot_writer import LeRobotWriter
from .pickle_writer import PickleWriter

__all__ = ['CollectEpisode', 'EpisodeRecord', 'collect_episode_kwargs', 'infer_success',
           'LeRobotWriter', 'PickleWriter']
