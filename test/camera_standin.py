"""A camera driver stand-in: stamped frames whose pixels encode their own stamp.

    python test/camera_standin.py --topic /cam/front/image_raw [--encoding rgb8|bgr8|mono8|16UC1]
        [--rate 30] [--width 640 --height 480] [--stop-after S] [--stamp-lag S] [--best-effort]

Publishes what a driver node (usb_cam, v4l2_camera, realsense2_camera) publishes:
``sensor_msgs/Image`` (or ``CompressedImage`` JPEG on a ``.../compressed`` topic) stamped with
the capture time. The centre square of each frame is an 8x8 grid of blocks: row 0 is a colour
marker (red, green, blue, white: shows a swapped channel order), rows 1-6 hold the stamp in
milliseconds (48 bits, one bit per block, white = 1), row 7 the frame's sequence number mod
256. The grid survives the env node's centre crop, resize and JPEG, so a test reads back from
a stored observation exactly which frame it is and compares its stamp with the state's time.

``--stop-after`` goes silent (a dropped camera), ``--stamp-lag`` stamps frames that long in the
past (a camera whose frames arrive late), ``--rate`` sets a slow camera.
"""
from __future__ import annotations

import argparse
import io
import signal
import sys
import time

import numpy as np

GRID = 8
MARKER = [(255, 0, 0), (255, 0, 0), (0, 255, 0), (0, 255, 0), (0, 0, 255), (0, 0, 255), (255, 255, 255),
          (255, 255, 255)]


def render(stamp_ms: int, seq: int, width: int, height: int) -> np.ndarray:
    """[H, W, 3] RGB: the grid over the centre square, grey outside it."""
    s = min(width, height)
    cell = s // GRID
    grid = np.zeros((GRID, GRID, 3), np.uint8)
    grid[0] = MARKER
    bits = [(stamp_ms >> i) & 1 for i in range(48)] + [(seq >> i) & 1 for i in range(8)]
    grid[1:].reshape(-1, 3)[:] = np.array(bits, np.uint8)[:, None] * 255
    img = np.full((height, width, 3), 128, np.uint8)
    top, left = (height - cell * GRID) // 2, (width - cell * GRID) // 2
    img[top:top + cell * GRID, left:left + cell * GRID] = grid.repeat(cell, 0).repeat(cell, 1)
    return img


def decode(img: np.ndarray) -> dict:
    """What ``render`` drew, read from a square crop of it (any size, RGB or grey)."""
    n = img.shape[0]
    centres = ((np.arange(GRID) + 0.5) * n / GRID).astype(int)
    px = img[centres][:, centres].astype(int)  # [8, 8, C]
    if px.ndim == 2:
        px = px[..., None]
    bright = px.mean(-1) > 127
    bits = bright[1:].reshape(-1)
    stamp_ms = sum(int(b) << i for i, b in enumerate(bits[:48]))
    seq = sum(int(b) << i for i, b in enumerate(bits[48:56]))
    marker = [tuple(int(v > 127) * 255 for v in px[0, j]) for j in range(GRID)] if px.shape[-1] == 3 else None
    return {'stamp_s': stamp_ms / 1000.0, 'seq': seq, 'rgb_order': marker == MARKER if marker else None}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--topic', required=True)
    ap.add_argument('--encoding', default='rgb8')
    ap.add_argument('--rate', type=float, default=30.0)
    ap.add_argument('--width', type=int, default=640)
    ap.add_argument('--height', type=int, default=480)
    ap.add_argument('--stop-after', type=float, default=0.0, help='go silent after this many seconds (0: never)')
    ap.add_argument('--stamp-lag', type=float, default=0.0, help='stamp frames this many seconds in the past')
    ap.add_argument('--best-effort', action='store_true', help='the sensor-data QoS (default: RELIABLE, depth 5)')
    a = ap.parse_args(argv)
    import rclpy
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import CompressedImage, Image
    rclpy.init()
    stop = []
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    node = rclpy.create_node('camera_standin_' + a.topic.strip('/').replace('/', '_'))
    qos = QoSProfile(depth=5, reliability=ReliabilityPolicy.BEST_EFFORT if a.best_effort else ReliabilityPolicy.RELIABLE)
    compressed = a.topic.rstrip('/').endswith('/compressed')
    pub = node.create_publisher(CompressedImage if compressed else Image, a.topic, qos)
    t0, seq = time.monotonic(), 0
    print(f'[camera_standin] {a.topic} {a.encoding} {a.width}x{a.height} at {a.rate:g} Hz', flush=True)
    while not stop and rclpy.ok():
        if a.stop_after and time.monotonic() - t0 > a.stop_after:
            time.sleep(0.05)
            continue
        now_ns = node.get_clock().now().nanoseconds - int(a.stamp_lag * 1e9)
        rgb = render(now_ns // 1_000_000, seq, a.width, a.height)
        if compressed:
            from PIL import Image as PILImage
            m = CompressedImage(format='rgb8; jpeg compressed bgr8')
            buf = io.BytesIO()
            PILImage.fromarray(rgb).save(buf, format='JPEG', quality=90)
            m.data = buf.getvalue()
        else:
            if a.encoding == 'bgr8':
                px = rgb[..., ::-1]
            elif a.encoding == 'mono8':
                px = rgb.mean(-1).astype(np.uint8)
            elif a.encoding == '16UC1':
                px = (rgb.mean(-1).astype(np.uint16) * 4)
            else:
                px = rgb
            px = np.ascontiguousarray(px)
            m = Image(height=a.height, width=a.width, encoding=a.encoding, step=px.strides[0])
            m.data = px.tobytes()
        m.header.stamp.sec, m.header.stamp.nanosec = divmod(now_ns, 1_000_000_000)
        m.header.frame_id = 'camera_standin'
        pub.publish(m)
        seq += 1
        time.sleep(max(0.0, t0 + seq / a.rate - time.monotonic()))
    node.destroy_node()
    rclpy.try_shutdown()
    return 0


if __name__ == '__main__':
    sys.exit(main())
