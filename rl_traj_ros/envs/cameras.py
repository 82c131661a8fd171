"""Camera frames for the real robot's observations: decoding, fitting, and time matching.

A ROS 2 workstation gets its cameras from driver nodes (realsense2_camera, usb_cam,
v4l2_camera, ...) publishing stamped ``sensor_msgs/Image`` or ``CompressedImage``. The env
node's subscriptions hand every frame to :class:`CameraFrames` (this module knows nothing of
ROS: a frame is its encoding, size, bytes and stamp), and the franky env asks it for the
observation that belongs to the robot state it just read: per camera, the newest frame whose
stamp lies within ``tolerance_s`` of the state's time. A camera that lags waits up to
``wait_s`` for a newer frame, then fails the step naming the camera: an observation whose
image is older than the state it is paired with would teach the policy the wrong thing.

Images are centre-cropped to a square and resized to ``size`` (the policy's and the dataset's
``[H, W, 3]`` uint8), so a 640x480 driver stream and a 128x128 sim render look alike downstream.
"""
from __future__ import annotations

import io
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np

COLOR = {'rgb8': (3, [0, 1, 2]), 'bgr8': (3, [2, 1, 0]), 'rgba8': (4, [0, 1, 2]), 'bgra8': (4, [2, 1, 0]),
         'mono8': (1, [0, 0, 0])}
DEPTH = ('16UC1', '32FC1', 'mono16')
SUPPORTED = tuple(COLOR) + ('CompressedImage jpeg/png',)


class CameraError(RuntimeError):
    """A camera cannot give the observation its step needs; the message names the camera and topic."""


def is_compressed(topic: str) -> bool:
    """image_transport's convention: ``<base>/compressed`` carries sensor_msgs/CompressedImage."""
    return topic.rstrip('/').endswith('/compressed')


def decode_raw(encoding: str, height: int, width: int, step: int, data: bytes) -> np.ndarray:
    """sensor_msgs/Image bytes -> [H, W, 3] uint8 RGB."""
    if encoding in DEPTH:
        raise ValueError(f'encoding {encoding} (depth) is not supported: subscribe to the colour stream '
                         f'({", ".join(COLOR)}) or its /compressed topic')
    if encoding not in COLOR:
        raise ValueError(f'encoding {encoding!r} is not supported (supported: {", ".join(SUPPORTED)})')
    channels, order = COLOR[encoding]
    if height <= 0 or width <= 0 or step < width * channels or len(data) < step * height:
        raise ValueError(f'{encoding} {width}x{height} step {step}: {len(data)} data bytes do not hold the image')
    rows = np.frombuffer(data, np.uint8, count=step * height).reshape(height, step)
    img = rows[:, :width * channels].reshape(height, width, channels)
    return np.ascontiguousarray(img[..., order])


def decode_compressed(fmt: str, data: bytes) -> np.ndarray:
    """sensor_msgs/CompressedImage (jpeg or png, as image_transport's compressed plugin writes) -> RGB."""
    from PIL import Image
    try:
        with Image.open(io.BytesIO(bytes(data))) as im:
            return np.asarray(im.convert('RGB'))
    except Exception as e:  # noqa: BLE001 - any decoder failure is a bad frame, named by the caller
        raise ValueError(f'CompressedImage format {fmt!r}: cannot decode ({e})') from e


def fit(img: np.ndarray, size: int) -> np.ndarray:
    """Centre-crop to a square, then resize to ``size`` x ``size`` (area-averaging downscale)."""
    from PIL import Image
    h, w = img.shape[:2]
    s = min(h, w)
    top, left = (h - s) // 2, (w - s) // 2
    img = img[top:top + s, left:left + s]
    if s == size:
        return np.ascontiguousarray(img)
    return np.asarray(Image.fromarray(img).resize((size, size), Image.Resampling.BOX if s > size
                                                  else Image.Resampling.BILINEAR))


@dataclass
class _Frame:
    stamp: float
    decode: Callable[[], np.ndarray]
    image: Optional[np.ndarray] = None


@dataclass(frozen=True)
class CameraSpec:
    name: str   # dataset camera name (observation.images.<name>); the first is the main camera
    topic: str  # the driver's topic; ``.../compressed`` means sensor_msgs/CompressedImage


def parse_cameras(names: Sequence[str], topics: Sequence[str]) -> list[CameraSpec]:
    """``camera_topics`` beside ``camera_names`` (the first name is the main camera); empty topics
    mean no camera. ``NAME=TOPIC`` entries name their camera themselves."""
    topics = [t.strip() for t in topics if t.strip()]
    specs = []
    for i, t in enumerate(topics):
        if '=' in t:
            name, t = (s.strip() for s in t.split('=', 1))
        elif i < len(names):
            name = names[i]
        else:
            raise ValueError(f'camera_topics[{i}] {t!r} has no name: give camera_names one per topic '
                             'or write NAME=TOPIC')
        if not t.startswith('/') and not t[:1].isalpha():
            raise ValueError(f'camera_topics[{i}]: {t!r} is not a topic name')
        specs.append(CameraSpec(name, t))
    seen = [s.name for s in specs]
    dup = {n for n in seen if seen.count(n) > 1}
    if dup:
        raise ValueError(f'camera names must be unique: {sorted(dup)} given twice')
    return specs


class CameraFrames:
    """The newest frames of each camera, and the observation that matches a robot state's time.

    Thread-safe: driver callbacks ``put`` from the executor thread while the rollout thread
    calls ``observation``. ``clock()`` and the stamps share one time base (ROS time: drivers
    stamp frames with the system clock, as the env node's clock does)."""

    def __init__(self, cameras: Sequence[CameraSpec], size: int, tolerance_s: float, wait_s: float,
                 clock: Callable[[], float] = time.time, history_s: float = 1.0):
        self.cameras = list(cameras)
        self.size, self.tolerance_s, self.wait_s, self.clock = size, tolerance_s, wait_s, clock
        # frames kept by age, not count: a step delayed after reading the state (a loaded machine)
        # still finds the frame of that time; undecoded frames cost only their message
        self.history_s = max(history_s, 4 * tolerance_s)
        self._frames = {c.name: deque(maxlen=1024) for c in self.cameras}
        self._cond = threading.Condition()
        self._error: dict[str, str] = {}  # a camera that cannot work (wrong message type), named
        self._taken: dict[str, float] = {}  # the stamp of the frame the last step took, per camera
        self.received = {c.name: 0 for c in self.cameras}
        self.rejected = {c.name: 0 for c in self.cameras}

    def _label(self, name: str) -> str:
        topic = next(c.topic for c in self.cameras if c.name == name)
        return f'camera {name!r} on {topic}'

    def put(self, name: str, stamp_s: float, decode: Callable[[], np.ndarray]) -> None:
        """Keep one frame. Decoding waits until a step picks the frame: drivers publish at
        30 Hz, a step takes one frame per camera at the control rate."""
        with self._cond:
            frames = self._frames[name]
            frames.append(_Frame(stamp_s, decode))
            while frames[0].stamp < stamp_s - self.history_s:
                frames.popleft()
            self.received[name] += 1
            self._cond.notify_all()

    def newest(self, name: str) -> Optional[float]:
        """The stamp of the camera's newest frame (None before the first)."""
        with self._cond:
            frames = self._frames[name]
            return frames[-1].stamp if frames else None

    def fail(self, name: str, reason: str) -> None:
        with self._cond:
            self._error[name] = reason
            self._cond.notify_all()

    def _image(self, name: str, f: '_Frame') -> np.ndarray:
        if f.image is None:
            try:
                f.image = fit(f.decode(), self.size)
            except ValueError as e:
                self.rejected[name] += 1
                raise CameraError(f'{self._label(name)}: {e}') from e
        return f.image

    def wait_ready(self, timeout_s: float) -> None:
        """Every camera delivered a frame that decodes (configure: a silent camera or a wrong
        encoding fails the transition before anything moves)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                for name, why in self._error.items():
                    raise CameraError(f'{self._label(name)}: {why}')
                missing = [c.name for c in self.cameras if not self._frames[c.name]]
                if not missing:
                    for c in self.cameras:
                        self._image(c.name, self._frames[c.name][-1])
                    return
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CameraError('; '.join(f'{self._label(n)}: no frame within {timeout_s:g} s' for n in missing))
                self._cond.wait(left)

    def frame(self, name: str, t_state: float) -> tuple[float, np.ndarray]:
        """The newest frame within ``tolerance_s`` of ``t_state``; waits up to ``wait_s`` for one.
        The frame the previous step took is taken again only when no newer one within the
        tolerance comes in time (until ``t_state + tolerance_s``): a driver that paused briefly
        (a loaded machine) delays the step a little instead of repeating an image."""
        deadline = time.monotonic() + self.wait_s
        tol = self.tolerance_s
        fresh_until = time.monotonic() + max(0.0, t_state + tol - self.clock())
        with self._cond:
            while True:
                if name in self._error:
                    raise CameraError(f'{self._label(name)}: {self._error[name]}')
                frames = self._frames[name]
                match = [f for f in frames if abs(f.stamp - t_state) <= tol]
                if match:
                    f = max(match, key=lambda f: f.stamp)
                    left = fresh_until - time.monotonic()
                    if f.stamp > self._taken.get(name, float('-inf')) or left <= 0:
                        self._taken[name] = f.stamp
                        return f.stamp, self._image(name, f)
                    self._cond.wait(left)  # the previous step's frame: a newer one may still come
                    continue
                if frames and frames[0].stamp > t_state + tol:
                    raise CameraError(f'{self._label(name)}: frames are {frames[0].stamp - t_state:.3f} s ahead of '
                                      'the robot state: are the camera and this machine on one clock?')
                if frames and frames[-1].stamp > t_state + tol:  # later frames only get further away
                    before = max(f.stamp for f in frames if f.stamp < t_state - tol)
                    after = min(f.stamp for f in frames if f.stamp > t_state + tol)
                    raise CameraError(f'{self._label(name)}: no frame within {tol:g} s of the robot state (nearest '
                                      f'{t_state - before:.3f} s before and {after - t_state:.3f} s after): a camera '
                                      f'slower than {1 / (2 * tol):g} Hz needs a larger camera_sync_tolerance_s')
                left = deadline - time.monotonic()
                if left <= 0:
                    age = f'newest frame {t_state - frames[-1].stamp:.3f} s older than' if frames else 'no frame for'
                    raise CameraError(f'{self._label(name)}: {age} the robot state (tolerance {tol:g} s); '
                                      f'waited {self.wait_s:g} s for a newer one')
                self._cond.wait(left)

    def observation(self, t_state: Optional[float] = None) -> dict[str, np.ndarray]:
        """``main_images`` [H, W, 3] (the first camera) and ``extra_view_images`` [N, H, W, 3]
        (the others, in order), as the sim env and the data-collection document name them."""
        t = self.clock() if t_state is None else t_state
        imgs = [self.frame(c.name, t)[1] for c in self.cameras]
        out = {'main_images': imgs[0]} if imgs else {}
        if len(imgs) > 1:
            out['extra_view_images'] = np.stack(imgs[1:])
        return out
