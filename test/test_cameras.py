"""Cameras from driver topics (issue 20): decoding, fitting, time matching; then the same over
DDS with the camera stand-in (test/camera_standin.py) as the drivers: a synchronized camera, a
JPEG one, BGR and mono ones, a dropped camera, a slow camera, late stamps, a depth encoding."""
import io
import time

import numpy as np
import pytest

import camera_standin as standin
from rl_traj_ros.envs.cameras import (CameraError, CameraFrames, CameraSpec, decode_compressed, decode_raw, fit,
                                      parse_cameras)
from rosutil import ros_process


def test_decode_every_encoding_to_rgb():
    rgb = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    assert np.array_equal(decode_raw('rgb8', 2, 3, 9, rgb.tobytes()), rgb)
    assert np.array_equal(decode_raw('bgr8', 2, 3, 9, rgb[..., ::-1].tobytes()), rgb)
    padded = np.zeros((2, 12), np.uint8)  # a row step larger than width * 3 (drivers pad rows)
    padded[:, :9] = rgb.reshape(2, 9)
    assert np.array_equal(decode_raw('rgb8', 2, 3, 12, padded.tobytes()), rgb)
    mono = np.array([[0, 10, 20], [30, 40, 50]], np.uint8)
    assert np.array_equal(decode_raw('mono8', 2, 3, 3, mono.tobytes()), np.repeat(mono[..., None], 3, -1))
    with pytest.raises(ValueError, match='16UC1 \\(depth\\) is not supported'):
        decode_raw('16UC1', 2, 3, 6, bytes(12))
    with pytest.raises(ValueError, match="'yuv422' is not supported"):
        decode_raw('yuv422', 2, 3, 6, bytes(12))
    with pytest.raises(ValueError, match='17 data bytes do not hold'):
        decode_raw('rgb8', 2, 3, 9, bytes(17))
    with pytest.raises(ValueError, match="format 'jpeg'"):
        decode_compressed('jpeg', b'not a jpeg')


def test_fit_crops_the_centre_square_and_resizes():
    img = np.zeros((480, 640, 3), np.uint8)
    img[:, 80:560] = 200  # the centre square
    out = fit(img, 128)
    assert out.shape == (128, 128, 3) and out.dtype == np.uint8 and (out == 200).all()
    assert fit(np.zeros((64, 64, 3), np.uint8), 128).shape == (128, 128, 3)  # small frames are upscaled


@pytest.mark.parametrize('jpeg', [False, True])
def test_standin_pixels_survive_the_crop_resize_and_jpeg(jpeg):
    stamp_ms = 1_796_000_000_123
    img = standin.render(stamp_ms, 77, 640, 480)
    if jpeg:
        from PIL import Image
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, format='JPEG', quality=90)
        img = decode_compressed('jpeg', buf.getvalue())
    got = standin.decode(fit(img, 128))
    assert got == {'stamp_s': stamp_ms / 1000.0, 'seq': 77, 'rgb_order': True}
    assert standin.decode(fit(img[..., ::-1].copy(), 128))['rgb_order'] is False  # a swap shows


def _frames(tolerance=0.05, wait=0.3):
    clock = [100.0]
    f = CameraFrames([CameraSpec('front', '/cam/front'), CameraSpec('wrist', '/cam/wrist')], 16, tolerance, wait,
                     clock=lambda: clock[0])
    return f, clock


def _img(v):
    return lambda: np.full((32, 32, 3), v, np.uint8)


def test_observation_takes_the_newest_frame_within_the_tolerance():
    f, clock = _frames()
    for t, v in ((99.90, 1), (99.97, 2), (100.01, 3), (100.04, 4), (100.2, 5)):
        f.put('front', t, _img(v))
        f.put('wrist', t, _img(10 + v))
    obs = f.observation()  # state at 100.0: frames 2, 3, 4 are within 0.05 s; 4 is the newest of them
    assert obs['main_images'].shape == (16, 16, 3) and int(obs['main_images'][0, 0, 0]) == 4
    assert obs['extra_view_images'].shape == (1, 16, 16, 3) and int(obs['extra_view_images'][0, 0, 0, 0]) == 14


def test_a_step_waits_within_the_tolerance_for_a_frame_newer_than_the_last_steps():
    """A driver that paused (a loaded machine): the next step takes a newer frame if one comes
    within the tolerance window, else the previous one again, after at most the tolerance."""
    import threading
    f, clock = _frames(tolerance=0.2, wait=1.0)
    for cam in ('front', 'wrist'):
        f.put(cam, 99.99, _img(1))
    assert int(f.observation()['main_images'][0, 0, 0]) == 1
    for cam in ('front', 'wrist'):
        threading.Timer(0.05, f.put, (cam, 100.05, _img(2))).start()
    t0 = time.monotonic()
    assert int(f.observation()['main_images'][0, 0, 0]) == 2 and time.monotonic() - t0 >= 0.04  # waited for it
    t0 = time.monotonic()
    assert int(f.observation()['main_images'][0, 0, 0]) == 2  # none newer came: the same frame again
    assert 0.15 <= time.monotonic() - t0 < 0.9  # after the tolerance window (0.2 s), not camera_wait_s


def test_a_lagging_camera_waits_then_fails_naming_it():
    f, clock = _frames(wait=0.3)
    f.put('front', 99.99, _img(1))
    f.put('wrist', 99.80, _img(1))  # 0.2 s older than the state
    t0 = time.monotonic()
    with pytest.raises(CameraError, match=r"camera 'wrist' on /cam/wrist: newest frame 0.200 s older than the robot "
                                          r'state \(tolerance 0.05 s\); waited 0.3 s'):
        f.observation()
    assert time.monotonic() - t0 >= 0.3
    # a frame that arrives while the step waits is taken
    import threading
    threading.Timer(0.1, f.put, ('wrist', 100.01, _img(7))).start()
    assert int(f.observation()['extra_view_images'][0, 0, 0, 0]) == 7


def test_clock_skew_and_silence_and_bad_frames_are_named():
    f, clock = _frames()
    f.put('front', 105.0, _img(1))
    with pytest.raises(CameraError, match="'front' on /cam/front: frames are 5.000 s ahead"):
        f.frame('front', 100.0)
    with pytest.raises(CameraError, match=r"camera 'wrist' on /cam/wrist: no frame within 0.2 s"):
        f.wait_ready(0.2)
    f.put('wrist', 100.0, lambda: decode_raw('16UC1', 2, 2, 4, bytes(8)))
    with pytest.raises(CameraError, match=r"'wrist' on /cam/wrist: encoding 16UC1 \(depth\) is not supported"):
        f.wait_ready(0.2)
    assert f.rejected == {'front': 0, 'wrist': 1}


def test_parse_cameras():
    assert parse_cameras(['front', 'wrist'], ['']) == []
    assert parse_cameras(['front', 'wrist'], ['/a/image_raw', 'side=/b/image_raw/compressed']) == [
        CameraSpec('front', '/a/image_raw'), CameraSpec('side', '/b/image_raw/compressed')]
    with pytest.raises(ValueError, match=r"camera_topics\[1\] '/b' has no name"):
        parse_cameras(['front'], ['/a', '/b'])
    with pytest.raises(ValueError, match="unique: \\['front'\\]"):
        parse_cameras(['front'], ['/a', 'front=/b'])


# -- over DDS: the stand-in as the driver, the env node's CameraSubscriber as the reader ----------------

def _subscriber(ctx, cameras, tolerance=0.1, wait=1.0):
    from rl_traj_ros.ros.images import CameraSubscriber
    frames = CameraFrames([CameraSpec(n, t) for n, t in cameras], 128, tolerance, wait)
    _subscriber.count = getattr(_subscriber, 'count', 0) + 1
    sub = CameraSubscriber(f'camera_test_{_subscriber.count}', '/', frames, context=ctx)
    frames.clock = sub.clock_s
    return sub


def test_cameras_over_dds_sync_encodings_drop_slow_late_depth(rclpy_context):
    small = ['--width', '160', '--height', '120', '--rate', '10']  # the failure cases: little load on 2 cores
    cams = {  # name: (topic, stand-in options)
        'front': ('/standin/front/image_raw', []),  # 640x480 rgb8 at 30 Hz, as usb_cam
        'jpeg': ('/standin/jpeg/image_raw/compressed', ['--best-effort', '--rate', '15']),
        'bgr': ('/standin/bgr/image_raw', ['--encoding', 'bgr8', '--width', '320', '--height', '240', '--rate', '15']),
        'mono': ('/standin/mono/image_raw', ['--encoding', 'mono8', '--width', '320', '--height', '240',
                                             '--rate', '15']),
        'slow': ('/standin/slow/image_raw', [*small, '--rate', '2']),
        'late': ('/standin/late/image_raw', [*small, '--stamp-lag', '1.5']),  # later than camera_wait_s
        'depth': ('/standin/depth/image_raw', [*small, '--encoding', '16UC1']),
        'dropped': ('/standin/dropped/image_raw', [*small, '--stop-after', '5.0']),  # started last: silent in the test
    }
    from contextlib import ExitStack
    with ExitStack() as stack:
        for name, (topic, opts) in cams.items():
            stack.enter_context(ros_process(['test/camera_standin.py', '--topic', topic, *opts],
                                            ready_line='[camera_standin]'))
        t_ready = time.monotonic()
        # eight Python stand-ins on a loaded 2-core machine: a 30 Hz one once paused 0.27 s in the suite, which
        # the shipped 0.1 s tolerance rightly refuses; a real driver does not pause like that. The sync claim is
        # the median offset below
        good = _subscriber(rclpy_context, [(n, cams[n][0]) for n in ('front', 'jpeg', 'bgr', 'mono')], tolerance=0.3,
                           wait=3.0)
        bad = _subscriber(rclpy_context, [(n, cams[n][0]) for n in ('dropped', 'slow', 'late', 'depth')])
        try:
            good.wait_ready(20.0)
            offsets = []
            for _ in range(20):  # a 20 Hz control loop reading the state, then the matching frames
                time.sleep(0.05)
                t_state = good.clock_s()
                for name in ('front', 'jpeg', 'bgr', 'mono'):
                    stamp, img = good.frames.frame(name, t_state)
                    got = standin.decode(img)
                    assert got['stamp_s'] == pytest.approx(stamp, abs=1e-3), name  # the pixels are that frame
                    if name != 'mono':
                        assert got['rgb_order'] is True, name  # BGR is converted, JPEG decoded as RGB
                    offsets.append(t_state - got['stamp_s'])
            print(f'\nstate-to-frame offset: median {np.median(offsets) * 1e3:.1f} ms, '
                  f'max {max(offsets) * 1e3:.1f} ms (15-30 Hz cameras)')
            assert abs(float(np.median(offsets))) <= 0.1   # the newest frame at the state's time, not a stale one
            obs = good.frames.observation()
            assert obs['main_images'].shape == (128, 128, 3) and obs['extra_view_images'].shape == (3, 128, 128, 3)
            t_depth = bad.frames.newest('depth')   # its own frame's time: the encoding, whatever the load
            assert t_depth is not None, 'the depth stand-in sent nothing'
            with pytest.raises(CameraError, match=r"'depth' on /standin/depth/image_raw: encoding 16UC1 \(depth\)"):
                bad.frames.frame('depth', t_depth)
            assert bad.frames.received['dropped'] > 0
            time.sleep(max(0.0, t_ready + 6.0 - time.monotonic()))  # 'dropped' went silent after 5 s
            with pytest.raises(CameraError, match=r"camera 'dropped' on /standin/dropped/image_raw: newest frame "
                                                  r'[0-9.]+ s older than the robot state'):
                bad.frames.frame('dropped', bad.clock_s())
            with pytest.raises(CameraError, match=r"camera 'late' on /standin/late/image_raw: newest frame [0-9.]+ s "
                                                  r'older than the robot state \(tolerance 0.1 s\); waited 1 s'):
                bad.frames.frame('late', bad.clock_s())
        finally:
            good.close()
            bad.close()
        # a 2 Hz camera: with a tolerance of 0.3 s the step waits for the frame that matches (up to 0.3 s);
        # with 0.1 s most states have no frame near enough: the step fails, naming the camera and why
        slow = _subscriber(rclpy_context, [('slow', cams['slow'][0])], tolerance=0.3, wait=1.0)
        try:
            slow.wait_ready(20.0)
            for _ in range(2):  # a state 0.35 s after the newest frame: the next one (0.5 s after it) matches
                newest = slow.frames.newest('slow')
                t0 = time.monotonic()
                stamp, img = slow.frames.frame('slow', newest + 0.35)
                waited = time.monotonic() - t0
                assert stamp > newest and standin.decode(img)['stamp_s'] == pytest.approx(stamp, abs=1e-3)
                assert waited > 0.02, waited  # it waited for the next frame (within camera_wait_s: no error)
            slow.frames.tolerance_s = 0.05
            with pytest.raises(CameraError, match=r"camera 'slow' on /standin/slow/image_raw: no frame within 0.05 s "
                                                  r'of the robot state \(nearest [0-9.]+ s before and [0-9.]+ s after\)'):
                for _ in range(10):
                    slow.frames.frame('slow', slow.clock_s())
                    time.sleep(0.13)
        finally:
            slow.close()
        # configure: a camera without a driver, and a depth stream, fail naming camera, topic and reason
        for cam, why in ((('nobody', '/standin/nobody/image_raw'), r'no frame within 1 s \(no publisher on '
                          r'/standin/nobody/image_raw: is the camera driver running\?\)'),
                         (('depth', cams['depth'][0]), r'encoding 16UC1 \(depth\) is not supported')):
            sub = _subscriber(rclpy_context, [cam])
            try:
                with pytest.raises(CameraError, match=f"camera '{cam[0]}' on {cam[1]}: {why}"):
                    sub.wait_ready(1.0 if cam[0] == 'nobody' else 20.0)
            finally:
                sub.close()
