"""Camera driver topics -> :class:`~rl_traj_ros.envs.cameras.CameraFrames`.

One subscription per camera, ``sensor_msgs/Image`` or, for a ``.../compressed`` topic,
``sensor_msgs/CompressedImage``; the frame keeps its header stamp (the driver's capture time,
ROS time) and decodes only when a step picks it.
"""
from __future__ import annotations

import threading
import time
from functools import partial
from typing import Optional

from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile
from sensor_msgs.msg import CompressedImage, Image

from ..params.spec import Config
from ..envs.cameras import (CameraError, CameraFrames, CameraSpec, decode_compressed, decode_raw, is_compressed,
                            parse_cameras)


def rgb_image_msg(img, stamp, frame_id: str) -> Image:
    """An [H, W, 3] uint8 frame as a ``sensor_msgs/Image`` (rgb8)."""
    m = Image(height=img.shape[0], width=img.shape[1], encoding='rgb8', step=img.shape[1] * 3)
    m.header.stamp = stamp
    m.header.frame_id = frame_id
    m.data = img.tobytes()
    return m


def stamp_s(header) -> float:
    return header.stamp.sec + header.stamp.nanosec * 1e-9


def _on_image(frames: CameraFrames, name: str, m: Image) -> None:
    frames.put(name, stamp_s(m.header), partial(decode_raw, m.encoding, m.height, m.width, m.step, m.data))


def _on_compressed(frames: CameraFrames, name: str, m: CompressedImage) -> None:
    frames.put(name, stamp_s(m.header), partial(decode_compressed, m.format, m.data))


class CameraSubscriber:
    """The camera subscriptions on a node of their own, spun by their own thread.

    The env node's executor is blocked while it configures (connecting to the robot, waiting
    for the cameras' first frames), and a lifecycle transition runs in that executor: frames
    must keep arriving meanwhile, so they do not go through it.

    Each topic is subscribed once its driver is discovered, with the driver's reliability
    (rosbag2's adaptive QoS): BEST_EFFORT matches every driver, but Fast DDS here loses most
    best-effort samples of a raw 640x480 frame (fragmented), while a RELIABLE KEEP_LAST reader
    gets every frame from a RELIABLE driver (usb_cam, realsense2_camera) without ever blocking
    it. A topic whose publisher has another message type fails that camera, named."""

    TYPES = {'sensor_msgs/msg/Image': Image, 'sensor_msgs/msg/CompressedImage': CompressedImage}

    def __init__(self, owner_name: str, namespace: str, frames: CameraFrames, depth: int = 5, context=None):
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        self.frames = frames
        self.context = context
        self.depth = depth
        # no global arguments: launch's `__node:=` remap would rename this helper to its owner's name (two
        # nodes of one name in `ros2 node list`); its name and namespace are given here, its topics by parameter
        self.node = rclpy.create_node(f'{owner_name}_cameras', namespace=namespace or '/', context=context,
                                      use_global_arguments=False)
        self.subs: dict[str, object] = {}
        self.reliability: dict[str, str] = {}
        self._executor = SingleThreadedExecutor(context=context)
        self._executor.add_node(self.node)
        self._thread = threading.Thread(target=self._spin, name='cameras', daemon=True)
        self._thread.start()

    @classmethod
    def from_params(cls, node, p: Config, log) -> tuple[Optional['CameraSubscriber'], Config]:
        """The env node's cameras (``camera_topics`` beside ``camera_names``; None without) and its
        parameters with ``camera_names`` the cameras' own (``NAME=TOPIC``), main camera first."""
        specs = parse_cameras(p['camera_names'], p['camera_topics'])
        if not specs:
            return None, p
        if p['env_type'] != 'franky':
            raise ValueError('camera_topics are for env_type franky: the sim renders its own cameras (image_obs)')
        frames = CameraFrames(specs, p['image_size'], p['camera_sync_tolerance_s'], p['camera_wait_s'])
        sub = cls(node.get_name(), node.get_namespace(), frames)
        frames.clock = sub.clock_s
        log('cameras: ' + ', '.join(f'{c.name} <- {c.topic}' for c in specs))
        return sub, p.replace(camera_names=[c.name for c in specs])  # the dataset's observation.images.<name>

    def _subscribe_discovered(self) -> None:
        from rclpy.qos import ReliabilityPolicy
        for c in self.frames.cameras:
            c: CameraSpec
            if c.name in self.subs:
                continue
            pubs = self.node.get_publishers_info_by_topic(c.topic)
            if not pubs:
                continue
            kind = CompressedImage if is_compressed(c.topic) else Image
            types = sorted({p.topic_type for p in pubs})
            if any(self.TYPES.get(t) is not kind for t in types):
                self.frames.fail(c.name, f'publishes {", ".join(types)}, expected {kind.__name__} '
                                         f"(a '.../compressed' topic carries CompressedImage)")
                self.subs[c.name] = None
                continue
            reliable = all(p.qos_profile.reliability == ReliabilityPolicy.RELIABLE for p in pubs)
            qos = QoSProfile(depth=self.depth, history=HistoryPolicy.KEEP_LAST, durability=DurabilityPolicy.VOLATILE,
                             reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT)
            cb = partial(_on_compressed if kind is CompressedImage else _on_image, self.frames, c.name)
            self.subs[c.name] = self.node.create_subscription(kind, c.topic, cb, qos)
            self.reliability[c.name] = 'reliable' if reliable else 'best_effort'

    def _spin(self) -> None:
        import rclpy
        next_check = 0.0
        try:
            while rclpy.ok(context=self.context) and self._thread is not None:
                if len(self.subs) < len(self.frames.cameras) and time.monotonic() >= next_check:
                    self._subscribe_discovered()
                    next_check = time.monotonic() + 0.1
                self._executor.spin_once(timeout_sec=0.05)
        except Exception:  # noqa: BLE001 - the context went away at shutdown
            pass

    def wait_ready(self, timeout_s: float) -> None:
        """Every camera delivered a frame that decodes; else a CameraError naming each camera
        that did not, and whether its driver was found at all."""
        try:
            self.frames.wait_ready(timeout_s)
        except CameraError as e:
            silent = [c.topic for c in self.frames.cameras if c.name not in self.subs]
            if silent:
                raise CameraError(f'{e} (no publisher on {", ".join(silent)}: is the camera driver running?)') from None
            raise

    def clock_s(self) -> float:
        """ROS time in seconds: the time base the drivers stamp frames with."""
        return self.node.get_clock().now().nanoseconds * 1e-9

    def close(self) -> None:
        t, self._thread = self._thread, None
        if t is not None:
            t.join(timeout=2.0)
        self._executor.shutdown(timeout_sec=1.0)
        self.node.destroy_node()
