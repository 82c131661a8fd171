"""CollectEpisode: vector auto-reset envs, pickle content vs ground truth, LeRobot trees."""
import io
import json
import os
import pickle
from pathlib import Path

import gymnasium as gym
import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image

from rl_traj_ros.episodes import CollectEpisode, infer_success
from rl_traj_ros.episodes.lerobot_writer import LeRobotWriter
from rl_traj_ros.episodes.record import EpisodeRecord

from episode_envs import ScriptedEnv

# 4 envs with mixed success / failure / truncation and different lengths
SETUPS = [((3, 2), ('success', 'fail')), ((2,), ('trunc', 'success')), ((4, 1), ('fail', 'success', 'trunc')),
          ((1,), ('success',))]


def make_vec(mode, log):
    fns = [lambda i=i: ScriptedEnv(i, *SETUPS[i], log=log) for i in range(4)]
    return gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)


def run_vec(tmp_path, mode, steps=12, **kw):
    log = []
    env = CollectEpisode(make_vec(mode, log), str(tmp_path), num_envs=4, rank=2, **{'export_format': 'pickle', **kw})
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(steps):
        env.step(rng.uniform(-1, 1, (4, 7)).astype(np.float32))
    env.close()
    return env, log


def finished(log):
    return [r for r in log if len(r['actions']) and (len(r['actions']) == (
        SETUPS[r['env']][0][r['episode'] % len(SETUPS[r['env']][0])]))]


@pytest.mark.parametrize('mode', [gym.vector.AutoresetMode.NEXT_STEP, gym.vector.AutoresetMode.SAME_STEP])
def test_vector_pickles_match_ground_truth(tmp_path, mode):
    env, log = run_vec(tmp_path, mode)
    truth = finished(log)
    files = sorted(Path(tmp_path).glob('*.pkl'))
    assert len(files) == len(truth) == env.episodes_saved
    assert {r['outcome'] for r in truth} == {'success', 'fail', 'trunc'}
    by_name = {f.name: f for f in files}
    for r in truth:
        tag = 'success' if r['outcome'] == 'success' else 'fail'
        name = f"rank_2_env_{r['env']}_episode_{r['episode']}_{tag}.pkl"
        d = pickle.loads(by_name[name].read_bytes())
        n = len(r['actions'])
        assert (d['rank'], d['env_idx'], d['episode_id'], d['success']) == (2, r['env'], r['episode'], tag == 'success')
        assert len(d['observations']) == n + 1 and len(d['actions']) == len(d['rewards']) == len(d['infos']) == n
        for got, want in zip(d['observations'], r['obs']):  # pre-reset final obs included, reset obs first
            assert all(np.array_equal(got[k], want[k]) for k in want)
        assert all(np.array_equal(a, b) for a, b in zip(d['actions'], r['actions']))
        assert d['rewards'] == r['rewards']
        assert d['terminated'][-1] == (r['outcome'] != 'trunc') and d['truncated'][-1] == (r['outcome'] == 'trunc')
        assert not any(d['terminated'][:-1]) and not any(d['truncated'][:-1])


def test_only_success_drops_failures(tmp_path):
    env, log = run_vec(tmp_path, gym.vector.AutoresetMode.NEXT_STEP, only_success=True)
    truth = [r for r in finished(log) if r['outcome'] == 'success']
    assert len(list(Path(tmp_path).glob('*_success.pkl'))) == len(truth) > 0
    assert not list(Path(tmp_path).glob('*_fail.pkl'))
    assert env.episodes_dropped == len(finished(log)) - len(truth)


def test_single_env(tmp_path):
    log = []
    env = CollectEpisode(ScriptedEnv(0, (2,), ('success', 'trunc'), log=log), str(tmp_path), export_format='pickle')
    for _ in range(3):
        env.reset()
        done = False
        while not done:
            _, _, te, tr, _ = env.step(np.zeros(7, np.float32))
            done = te or tr
    env.close()
    env.close()  # twice is safe
    names = sorted(p.name for p in Path(tmp_path).glob('*.pkl'))
    assert names == ['rank_0_env_0_episode_0_success.pkl', 'rank_0_env_0_episode_1_fail.pkl',
                     'rank_0_env_0_episode_2_success.pkl']


def test_success_inference_order():
    assert infer_success([{'success': True}, {'final_info': {'success_once': False}, 'success': True}], True) is False
    assert infer_success([{'episode': {'success_at_end': 1, 'success': 0}}], False) is True
    assert infer_success([{'success_at_end': 0, 'success': 1}], True) is False
    assert infer_success([{'success': True}, {}], False) is True  # scans back from the last step
    assert infer_success([{}, {}], True) is True and infer_success([], False) is False


def test_writer_errors_surface_on_next_call(tmp_path):
    env = CollectEpisode(ScriptedEnv(0, (1,), ('success',)), str(tmp_path), export_format='pickle')

    def boom(ep):
        raise OSError('disk full (injected)')
    env.writer.write = boom
    env.reset()
    env.step(np.zeros(7, np.float32))
    env._bg.join()
    with pytest.raises(RuntimeError, match='disk full'):
        env.reset()
    env.close()


def _decode(cell):
    return np.asarray(Image.open(io.BytesIO(cell['bytes'])))


KEYS = {  # naming -> (main camera, second extra view, state, action, done, success)
    'lerobot': ('observation.images.front', 'observation.images.right', 'observation.state', 'action', 'next.done',
                'next.success'),
    'rlinf': ('image', 'extra_view_image-1', 'state', 'actions', 'done', 'is_success'),
}


def _video_frames(root, info, key, episode):
    """An episode's frames of one camera, cut from its MP4 file by the episode's timestamps."""
    from rl_traj_ros.episodes.video import decode_frames
    path = root / info['video_path'].format(video_key=key, chunk_index=episode[f'videos/{key}/chunk_index'],
                                            file_index=episode[f'videos/{key}/file_index'])
    first = round(episode[f'videos/{key}/from_timestamp'] * info['fps'])
    return decode_frames(path)[first:first + episode['length']]


@pytest.mark.parametrize('version,naming,storage', [('v3.0', 'lerobot', 'png'), ('v2.1', 'lerobot', 'png'),
                                                    ('v3.0', 'rlinf', 'png'), ('v3.0', 'lerobot', 'video')])
def test_lerobot_trees_read_back_with_pyarrow(tmp_path, version, naming, storage):
    log = []
    hw = 32 if storage == 'video' else 8  # libsvtav1 needs width >= 32
    fns = [lambda i=i: ScriptedEnv(i, *SETUPS[i], log=log, hw=hw) for i in range(4)]
    env = CollectEpisode(gym.vector.SyncVectorEnv(fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP),
                         str(tmp_path), num_envs=4, export_format='lerobot', fps=15, lerobot_version=version,
                         finalize_interval=2, naming=naming, image_storage=storage,
                         camera_names=['front', 'left', 'right'], state_names=['env', 'episode', 't', 'v'])
    env.reset(seed=0)
    rng = np.random.default_rng(1)
    for _ in range(12):
        env.step(rng.uniform(-1, 1, (4, 7)).astype(np.float32))
    env.close()
    main, extra1, state, action, done, success = KEYS[naming]
    truth = finished(log)
    root = Path(tmp_path)
    info = json.loads((root / 'meta' / 'info.json').read_text())
    assert info['codebase_version'] == version and info['fps'] == 15
    assert info['total_episodes'] == len(truth)
    assert info['total_frames'] == sum(len(r['actions']) for r in truth)
    feats = info['features']
    assert feats[main]['shape'] == [hw, hw, 3] and feats[main]['dtype'] == ('video' if storage == 'video' else 'image')
    assert {main, extra1, state, action, done, success, 'timestamp', 'frame_index', 'episode_index', 'index',
            'task_index'} <= set(feats)
    assert feats[state]['names'] == ['env', 'episode', 't', 'v']
    assert feats[action]['names'] == [f'action_{i}' for i in range(7)]  # the env names none
    assert ('next.reward' in feats) == (naming == 'lerobot')
    if storage == 'video':
        assert feats[main]['info']['video.codec'] == 'av1' and feats[main]['info']['video.pix_fmt'] == 'yuv420p'
        assert info['video_path'].startswith('videos/{video_key}/')
    files = sorted((root / 'data').glob('*/*.parquet'))
    table = pq.read_table(files[0]) if len(files) == 1 else __import__('pyarrow').concat_tables(
        [pq.read_table(f) for f in files])
    rows = table.to_pylist()
    assert [r['index'] for r in rows] == list(range(len(rows)))  # index = row position
    episodes = ({e['episode_index']: e for e in pq.read_table(
        root / 'meta' / 'episodes' / 'chunk-000' / 'file-000.parquet').to_pylist()} if version == 'v3.0' else {})
    # episodes appear in completion order; match each back to the env's ground truth
    eps = {}
    for r in rows:
        eps.setdefault(r['episode_index'], []).append(r)
    assert len(eps) == len(truth)
    remaining = list(truth)
    worst = 0.0
    for idx, frames in sorted(eps.items()):
        st = frames[0][state]
        want = next(t for t in remaining if t['env'] == int(st[0]) and t['episode'] == int(st[1]))
        remaining.remove(want)
        assert len(frames) == len(want['actions'])
        if storage == 'video':
            mains, extras = (_video_frames(root, info, k, episodes[idx]) for k in (main, extra1))
        else:
            mains, extras = ([_decode(f[k]) for f in frames] for k in (main, extra1))
        for f, (i, obs) in zip(frames, enumerate(want['obs'][:-1])):
            assert f['frame_index'] == i and abs(f['timestamp'] - i / 15) < 1e-6
            for got, ref in ((mains[i], obs['main_images']), (extras[i], obs['extra_view_images'][1])):
                err = np.abs(got.astype(float) - ref).mean() / 255
                worst = max(worst, err)
                assert err <= 0.03 if storage == 'video' else np.array_equal(got, ref)
            assert np.allclose(f[state], obs['states']) and np.allclose(f[action], want['actions'][i])
            last = i == len(want['actions']) - 1
            ok = want['outcome'] == 'success'
            # lerobot's next.success marks the succeeding step; the spec's is_success every frame
            assert f[success] == (ok and last if naming == 'lerobot' else ok)
            assert f[done] == last
            if naming == 'lerobot':
                assert f['next.reward'] == pytest.approx(want['rewards'][i])
    assert not remaining
    stats = json.loads((root / 'meta' / 'stats.json').read_text())
    assert stats[action]['count'] == [info['total_frames']]
    assert np.array(stats[main]['mean']).shape == (3, 1, 1)
    assert set(stats[state]) == {'min', 'max', 'mean', 'std', 'count', 'q01', 'q10', 'q50', 'q90', 'q99'}
    if version == 'v3.0':
        tasks = pq.read_table(root / 'meta' / 'tasks.parquet')
        assert json.loads(tasks.schema.metadata[b'pandas'])['index_columns'] == ['task']
        ep_table = list(episodes.values())
        assert [e['dataset_from_index'] for e in ep_table] == [sum(x['length'] for x in ep_table[:i])
                                                                for i in range(len(ep_table))]
        # finalize_interval=2 made several complete checkpoints, all in one data file (as LeRobot's
        # recorder appends up to data_files_size_in_mb), one row group per episode
        assert len(files) == 1 and pq.ParquetFile(files[0]).num_row_groups == len(truth)
        assert {e['data/file_index'] for e in ep_table} == {0}
    else:
        lines = (root / 'meta' / 'episodes.jsonl').read_text().splitlines()
        assert len(lines) == len(truth)
        assert len((root / 'meta' / 'episodes_stats.jsonl').read_text().splitlines()) == len(truth)
        assert (root / 'meta' / 'tasks.jsonl').exists()
        assert files[0].name == 'episode_000000.parquet'


def test_data_file_rolls_over_at_its_size_limit_and_meta_is_readable_by_all(tmp_path):
    import stat
    w = LeRobotWriter(str(tmp_path / 'ds'), camera_names=['front'])
    w.data_files_size_mb = 1e-9  # every finalized file is "full": the next episode opens a new one
    for e in range(3):
        w.write(EpisodeRecord(0, e, observations=[{'states': np.full(4, e, np.float32),
                                                   'main_images': np.zeros((8, 8, 3), np.uint8)}] * 3,
                              actions=[np.zeros(7)] * 2, rewards=[0.0] * 2, interventions=[True, False]))
        w.finalize()
    w.close()
    files = sorted((tmp_path / 'ds' / 'data' / 'chunk-000').glob('file-*.parquet'))
    assert [f.name for f in files] == ['file-000.parquet', 'file-001.parquet', 'file-002.parquet']
    eps = pq.read_table(tmp_path / 'ds' / 'meta' / 'episodes' / 'chunk-000' / 'file-000.parquet').to_pylist()
    assert [e['data/file_index'] for e in eps] == [0, 1, 2]
    rows = pq.read_table(files[1]).to_pylist()
    assert [r['complementary_info.is_intervention'] for r in rows] == [1.0, 0.0]
    info = json.loads((tmp_path / 'ds' / 'meta' / 'info.json').read_text())
    assert info['features']['complementary_info.is_intervention'] == {'dtype': 'float32', 'shape': [1],
                                                                      'names': ['is_intervention']}
    umask = os.umask(0)
    os.umask(umask)
    for f in (tmp_path / 'ds').rglob('*'):  # meta like data: readable by the other users of a share
        if f.is_file():
            assert stat.S_IMODE(f.stat().st_mode) == 0o666 & ~umask, f


def test_dataset_options_are_checked_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError, match='naming'):
        LeRobotWriter(str(tmp_path / 'a'), naming='rlds')
    with pytest.raises(ValueError, match='v3.0'):
        LeRobotWriter(str(tmp_path / 'b'), image_storage='video', version='v2.1')
    ep = EpisodeRecord(0, 0, observations=[{'states': np.zeros(4), 'main_images': np.zeros((8, 8, 3), np.uint8),
                                            'extra_view_images': np.zeros((2, 8, 8, 3), np.uint8)}] * 3,
                       actions=[np.zeros(7)] * 2, rewards=[0.0] * 2)
    w = LeRobotWriter(str(tmp_path / 'c'), camera_names=['front'])
    with pytest.raises(ValueError, match='3 camera streams but camera_names names 1'):
        w.write(ep)
    w = LeRobotWriter(str(tmp_path / 'd'), camera_names=['a', 'b', 'c'], state_names=['x'])
    with pytest.raises(ValueError, match='state_names has 1 entries but the state has 4 dims'):
        w.write(ep)
    w = LeRobotWriter(str(tmp_path / 'e'), camera_names=['a', 'b', 'c'], image_storage='video')
    with pytest.raises(ValueError, match='too small for libsvtav1'):  # instead of SVT-AV1's SIGFPE
        w.write(ep)


def test_lerobot_rejects_inconsistent_episode(tmp_path):
    w = LeRobotWriter(str(tmp_path))
    ep = EpisodeRecord(0, 0, observations=[{'states': np.zeros(4)}] * 3, actions=[np.zeros(7)] * 2, rewards=[0.0] * 2)
    w.write(ep)
    bad = EpisodeRecord(0, 1, observations=[{'states': np.zeros(5)}] * 3, actions=[np.zeros(7)] * 2, rewards=[0.0] * 2)
    with pytest.raises(ValueError, match='state has 5 dims'):
        w.write(bad)
    w.close()
    with pytest.raises(FileExistsError):
        LeRobotWriter(str(tmp_path))


def test_image_stats_match_numpy_reference():
    from rl_traj_ros.episodes import lerobot_stats as st
    rng = np.random.default_rng(5)
    frames = rng.integers(0, 256, (7, 9, 11, 3), dtype=np.uint8)
    frames[..., 1] //= 3
    s = st.image_stats(frames)
    flat = frames.reshape(-1, 3).astype(np.float64) / 255.0
    assert np.allclose(s['mean'].reshape(3), flat.mean(0)) and np.allclose(s['std'].reshape(3), flat.std(0))
    assert np.allclose(s['min'].reshape(3), flat.min(0)) and np.allclose(s['max'].reshape(3), flat.max(0))
    for name, q in zip(st.QNAMES, st.QUANTILES):
        assert np.allclose(s[name].reshape(3), np.quantile(flat, q, axis=0)), name
    assert s['count'].tolist() == [7]


def test_visual_tools(tmp_path):
    import torch
    from PIL import Image as PILImage
    from rl_traj_ros.storage.replay_buffer import TrajectoryReplayBuffer
    from rl_traj_ros.viz.contact_sheet import make_contact_sheet
    from rl_traj_ros.viz.dataset_frames import export_frames
    with TrajectoryReplayBuffer(auto_save=True, auto_save_path=str(tmp_path / 'buf')) as buf:
        for i in range(3):
            img = torch.full((4, 2, 16, 16, 3), 20 + 40 * i, dtype=torch.uint8)
            buf.add_trajectories([{'curr_obs/main_images': img, 'rewards': torch.ones(4, 2, 1),
                                   'dones': torch.zeros(4, 2, 1, dtype=torch.bool)}])
    sheet = PILImage.open(make_contact_sheet(str(tmp_path / 'buf'), str(tmp_path / 'sheet.png'), max_tiles=12,
                                             columns=4, tile=32))
    import numpy as np
    px = np.asarray(sheet.convert('RGB')).reshape(-1, 3)
    for level in (20, 60, 100):  # each trajectory's frames drawn as they are (4 tiles of ~32x32 px each)
        assert int((px == level).all(1).sum()) > 2000, level
    for naming, storage, main, extra, state in (('lerobot', 'png', 'main', 'extra_1', 'observation.state'),
                                                ('rlinf', 'png', 'image', 'extra_view_image-1', 'state'),
                                                ('lerobot', 'video', 'main', 'extra_1', 'observation.state')):
        log = []
        ds = tmp_path / f'ds_{naming}_{storage}'
        fns = [lambda i=i: ScriptedEnv(i, *SETUPS[i], log=log, hw=32) for i in range(4)]
        env = CollectEpisode(gym.vector.SyncVectorEnv(fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP),
                             str(ds), num_envs=4, export_format='lerobot', naming=naming, image_storage=storage)
        env.reset(seed=0)
        for _ in range(6):
            env.step(np.zeros((4, 7), np.float32))
        env.close()
        frames = tmp_path / f'frames_{naming}_{storage}'
        n = export_frames(str(ds), str(frames))
        assert n == json.loads((ds / 'meta' / 'info.json').read_text())['total_frames']
        ep0 = frames / 'episode_000000'
        assert (ep0 / f'step_000000_{main}.jpg').exists() and (ep0 / f'step_000000_{extra}.jpg').exists()
        txt = (ep0 / 'step_000000.txt').read_text()
        assert f'{state}:' in txt and 'action' in txt and 'success:' in txt
