"""Camera streams as MP4 the way lerobot 0.6.1 writes and decodes them, encoded with PyAV.

lerobot's defaults (``lerobot.configs.video.VideoEncoderConfig``): AV1 through libsvtav1,
yuv420p, a keyframe every 2 frames (its decoder seeks to the previous keyframe, so a short GOP
keeps random access cheap), CRF 30, preset 12. Frame ``i`` of a file carries pts ``i`` at time
base ``1/fps``: an episode that starts at frame ``k`` of the file has ``from_timestamp = k/fps``,
which is what lerobot adds to each frame's timestamp to find it in the file.

One ``VideoFile`` is one camera's file: episodes are appended until the dataset's next
checkpoint closes it (an MP4 is only readable once its index is written), so the writer keeps
one file per camera per checkpoint, as it does for the Parquet data file.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class VideoEncoding:
    """Encoder settings; the defaults are lerobot 0.6.1's, and land in info.json as it writes them."""
    vcodec: str = 'libsvtav1'
    pix_fmt: str = 'yuv420p'
    g: int = 2
    crf: int = 30
    preset: int = 12
    fast_decode: int = 0
    extra_options: dict = field(default_factory=dict)

    def codec_options(self) -> dict[str, str]:
        opts = {'g': str(self.g), 'crf': str(self.crf), 'preset': str(self.preset)}
        if self.vcodec == 'libsvtav1':
            opts['svtav1-params'] = f'fast-decode={max(0, min(2, self.fast_decode))}'
        opts.update({k: str(v) for k, v in self.extra_options.items() if k not in opts})
        return opts

    def info_fields(self) -> dict[str, Any]:
        """The encoder fields lerobot records next to what it probes from the file."""
        return {'video.g': self.g, 'video.crf': self.crf, 'video.preset': self.preset,
                'video.fast_decode': self.fast_decode, 'video.video_backend': 'pyav',
                'video.extra_options': dict(self.extra_options)}


def check_frame_size(encoding: VideoEncoding, height: int, width: int) -> None:
    """Refuse sizes the encoder cannot take, before it is opened: libsvtav1 (PyAV 15.1's build)
    kills the whole process with SIGFPE on frames narrower than 32 pixels (measured: widths 8,
    16, 24 crash, 32 and up work, heights down to 8 work); yuv420p needs even sides."""
    if encoding.vcodec == 'libsvtav1' and (width < 32 or height < 8):
        raise ValueError(f'{width}x{height} frames are too small for libsvtav1 (width >= 32, height >= 8): '
                         "store these cameras as image_storage='png'")
    if encoding.pix_fmt == 'yuv420p' and (width % 2 or height % 2):
        raise ValueError(f'{width}x{height} frames: yuv420p video needs even width and height')


def check_encoder(encoding: VideoEncoding) -> None:
    """Fail at start-up, not at the first episode, when PyAV lacks the codec."""
    import av
    try:
        av.codec.Codec(encoding.vcodec, 'w')
    except Exception as e:  # noqa: BLE001 - PyAV raises several types for an unknown codec
        raise ValueError(f'video codec {encoding.vcodec!r} is not available in this PyAV build: {e}') from e


class VideoFile:
    """Appends uint8 RGB frames ``[T, H, W, 3]`` to one MP4 file.

    Not thread-safe: the writer gives each camera one single-thread executor, which also keeps
    the episodes in order. PyAV releases the GIL while encoding, so cameras encode in parallel
    with each other and with the PNG / Parquet work.
    """

    def __init__(self, path: Path, fps: int, height: int, width: int, encoding: VideoEncoding):
        check_frame_size(encoding, height, width)
        os.environ.setdefault('SVT_LOG', '1')  # SVT-AV1 prints ~20 info lines per file to stderr; errors only
        import av
        self.path = Path(path)
        self.fps = int(fps)
        self.frames = 0
        self._av = av
        self._container = av.open(str(self.path), 'w', format='mp4')
        self._stream = self._container.add_stream(encoding.vcodec, self.fps, options=encoding.codec_options())
        self._stream.pix_fmt = encoding.pix_fmt
        self._stream.width, self._stream.height = int(width), int(height)
        self._stream.time_base = Fraction(1, self.fps)

    def add(self, frames: np.ndarray) -> None:
        for f in frames:
            vf = self._av.VideoFrame.from_ndarray(np.ascontiguousarray(f), format='rgb24')
            vf.pts = self.frames
            vf.time_base = Fraction(1, self.fps)
            for packet in self._stream.encode(vf):
                self._container.mux(packet)
            self.frames += 1

    def close(self) -> None:
        """Flush the encoder, write the MP4 index, and make the bytes durable."""
        for packet in self._stream.encode():
            self._container.mux(packet)
        self._container.close()
        with open(self.path, 'rb+') as fh:
            os.fsync(fh.fileno())


def probe_video_info(path: Path, encoding: VideoEncoding) -> dict[str, Any]:
    """A video feature's ``info`` block as lerobot's ``get_video_info`` builds it: the stream's
    own fields first, then the encoder settings, then the depth flag."""
    import av
    with av.open(str(path), 'r') as c:
        s = c.streams.video[0]
        info: dict[str, Any] = {'video.height': s.height, 'video.width': s.width,
                                'video.codec': s.codec.canonical_name, 'video.pix_fmt': s.pix_fmt,
                                'video.fps': int(s.base_rate), 'video.channels': 3,
                                'has_audio': len(c.streams.audio) > 0}
    for k, v in encoding.info_fields().items():
        info.setdefault(k, v)
    info['is_depth_map'] = False
    return info


def decode_frames(path: Path) -> np.ndarray:
    """Every frame of a file as uint8 ``[T, H, W, 3]`` (tests, inspection tools)."""
    import av
    with av.open(str(path), 'r') as c:
        return np.stack([f.to_ndarray(format='rgb24') for f in c.decode(c.streams.video[0])])
