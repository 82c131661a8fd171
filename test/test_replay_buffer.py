"""TrajectoryReplayBuffer: the spec's worked example, sampling, cache, crash safety, errors."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

from rl_traj_ros.collect.collector import TrajectoryCollector, TrajectoryPlan
from rl_traj_ros.data.synthetic import SyntheticSpec, make_parts
from rl_traj_ros.storage import replay_buffer as rb
from rl_traj_ros.storage import files as files_module
from rl_traj_ros.storage import index as index_module
from rl_traj_ros.storage.backends import MemoryStorage
from rl_traj_ros.storage.cache import TrajectoryCache
from rl_traj_ros.storage.files import BufferFileError, TrajectoryFiles
from rl_traj_ros.storage.layout import flatten_trajectory
from rl_traj_ros.storage.replay_buffer import TrajectoryReplayBuffer
from rl_traj_ros.storage.sampler import Draw, PrioritizedSampler, locate


def traj(tid, t=3, b=2):
    """A [T, B, ...] dict whose 'gid' field names every row globally: (tid, t, b)."""
    g = torch.Generator().manual_seed(tid)
    gid = torch.tensor([[tid * 10000 + i * 100 + j for j in range(b)] for i in range(t)])
    return {'gid': gid, 'actions': torch.randn(t, b, 7, generator=g),
            'obs/image': torch.randint(0, 255, (t, b, 4, 4, 3), generator=g, dtype=torch.uint8),
            'dones': torch.zeros(t, b, 1, dtype=torch.bool)}


@pytest.mark.parametrize('fmt', ['pt', 'pkl'])
def test_spec_worked_example(tmp_path, fmt):
    buf = TrajectoryReplayBuffer(seed=0, sample_window_size=2, auto_save=False, trajectory_format=fmt)
    assert buf.add_trajectories([traj(i) for i in range(5)]) == [0, 1, 2, 3, 4]
    before = (len(buf), buf.total_samples, buf.seqs)
    buf.save_checkpoint(str(tmp_path / 'ckpt'))
    assert (len(buf), buf.total_samples, buf.seqs) == before == (2, 12, [3, 4])  # unchanged
    index = json.loads((tmp_path / 'ckpt' / 'trajectory_index.json').read_text())
    meta = json.loads((tmp_path / 'ckpt' / 'metadata.json').read_text())
    assert index['trajectory_ids'] == [3, 4]
    assert meta['size'] == 2 and meta['total_samples'] == 12 and meta['trajectory_format'] == fmt
    assert index['trajectories']['3']['num_samples'] == 6 and index['trajectories']['3']['shape'] == [3, 2]
    for rank, expected in ((0, [3]), (1, [4])):
        r = TrajectoryReplayBuffer(seed=0, sample_window_size=2, trajectory_format=fmt)
        r.load_checkpoint(str(tmp_path / 'ckpt'), is_distributed=True, local_rank=rank, world_size=2)
        assert r.seqs == expected and len(r) == 1 and r.total_samples == 6
        assert set((r.sample(50)['gid'] // 10000).tolist()) == set(expected)
    full = TrajectoryReplayBuffer(seed=0, sample_window_size=2, trajectory_format=fmt)
    full.load_checkpoint(str(tmp_path / 'ckpt'))
    assert full.seqs == [3, 4]
    assert full.add_trajectories([traj(9)]) == [5]
    got = full.sample(64)
    assert torch.equal(got['actions'][got['gid'] == 40101], traj(4)['actions'][1, 1].expand(
        int((got['gid'] == 40101).sum()), 7))


def test_pt_and_pkl_save_the_same_range(tmp_path):
    for fmt in ('pt', 'pkl'):
        buf = TrajectoryReplayBuffer(sample_window_size=2, trajectory_format=fmt)
        buf.add_trajectories([traj(i) for i in range(5)])
        buf.save_checkpoint(str(tmp_path / fmt))
    assert (json.loads((tmp_path / 'pt' / 'trajectory_index.json').read_text())['trajectory_ids']
            == json.loads((tmp_path / 'pkl' / 'trajectory_index.json').read_text())['trajectory_ids'])


def test_auto_save_checkpoint_copies_the_window(tmp_path):
    with TrajectoryReplayBuffer(sample_window_size=2, auto_save=True, auto_save_path=str(tmp_path / 'auto')) as buf:
        buf.add_trajectories([traj(i) for i in range(5)])
        buf.save_checkpoint(str(tmp_path / 'ckpt'))
        assert len(buf) == 5 and buf.total_samples == 30  # everything stays in the auto-save dir
    assert sorted(p.name for p in (tmp_path / 'ckpt').glob('trajectory_*.pt')) == \
        ['trajectory_00000003.pt', 'trajectory_00000004.pt']
    meta = json.loads((tmp_path / 'ckpt' / 'metadata.json').read_text())
    assert meta['size'] == 2 and meta['total_samples'] == 12 and meta['trajectory_counter'] == 5
    assert len(list((tmp_path / 'auto').glob('trajectory_*.pt'))) == 5
    auto_index = json.loads((tmp_path / 'auto' / 'trajectory_index.json').read_text())
    assert auto_index['trajectory_ids'] == [0, 1, 2, 3, 4]


def test_appending_to_an_existing_directory(tmp_path):
    d = str(tmp_path / 'demos')
    with TrajectoryReplayBuffer(auto_save=True, auto_save_path=d) as buf:
        buf.add_trajectories([traj(i) for i in range(3)])
    first = (tmp_path / 'demos' / 'trajectory_00000001.pt').read_bytes()
    with TrajectoryReplayBuffer(auto_save=True, auto_save_path=d, sample_window_size=0) as buf:
        assert buf.seqs == [0, 1, 2]
        assert buf.add_trajectories([traj(7), traj(8)]) == [3, 4]
        buf.flush()
        assert set((buf.sample(400)['gid'] // 10000).tolist()) == {0, 1, 2, 7, 8}
    assert (tmp_path / 'demos' / 'trajectory_00000001.pt').read_bytes() == first
    assert json.loads((tmp_path / 'demos' / 'trajectory_index.json').read_text())['trajectory_ids'] == [0, 1, 2, 3, 4]


def test_flatten_is_time_major_and_trajectory_fields_align():
    flat, shape, _ = flatten_trajectory(traj(1, t=3, b=2))
    assert shape == [3, 2] and flat['gid'].tolist() == [10000, 10001, 10100, 10101, 10200, 10201]
    spec = SyntheticSpec(num_epochs=2, chunks_per_epoch=3, sources=((0, 0),), envs_per_source=2)
    col = TrajectoryCollector(TrajectoryPlan(num_epochs=2, chunks_per_epoch=3, sources=[(0, 0)], envs_per_source=2))
    t = [o for p, e in make_parts(spec) for o in col.push(p) + col.push(e)][0].trajectory
    flat, shape, _ = flatten_trajectory(t)
    assert shape == [6, 2] and flat['dones'].shape == (12, 2)
    # chunk 4 = epoch 1, chunk 1: boundary index 1*4 + 1 + 1 = 6 for dones, 5 for V(s_t), 6 for V(s_t+1)
    assert torch.equal(flat['dones'][8:10], t.dones[6])
    assert torch.equal(flat['prev_values'][8:10], t.prev_values[5])
    assert torch.equal(flat['next_values'][8:10], t.prev_values[6])


def test_max_episode_length():
    d = traj(0, t=6, b=2)
    d['dones'][1, 0] = True  # env 0: episodes of 2 and 4 chunks; env 1: 6 chunks, no done
    d['dones'][4, 1] = True  # env 1: 5 then 1
    _, _, m = flatten_trajectory(d)
    assert m == 5


def test_bucketize_boundaries():
    sizes = torch.tensor([3, 5, 2])
    idx = torch.tensor([0, 2, 3, 7, 8, 9])
    which, rows = locate(idx, sizes)
    assert which.tolist() == [0, 0, 1, 1, 2, 2] and rows.tolist() == [0, 2, 0, 4, 0, 1]


def test_sampling_is_uniform_over_the_window():
    buf = TrajectoryReplayBuffer(seed=3, sample_window_size=3)
    buf.add_trajectories([traj(i, t=2 + i, b=3) for i in range(6)])  # window: ids 3,4,5 of 15, 18, 21 rows
    counts: dict = {}
    n = 54000
    for _ in range(n // 1000):
        for g in buf.sample(1000)['gid'].tolist():
            counts[g] = counts.get(g, 0) + 1
    assert {g // 10000 for g in counts} == {3, 4, 5}
    cells = 15 + 18 + 21
    assert len(counts) == cells
    expected = n / cells
    chi2 = sum((c - expected) ** 2 / expected for c in counts.values())
    df = cells - 1
    assert (chi2 - df) / (2 * df) ** 0.5 < 4.0, chi2  # far inside the 99.99 % bound
    buf0 = TrajectoryReplayBuffer(seed=3, sample_window_size=0)
    buf0.add_trajectories([traj(i) for i in range(4)])
    assert {g // 10000 for g in buf0.sample(2000)['gid'].tolist()} == {0, 1, 2, 3}


def test_cache_eviction_order_and_one_read_per_call(tmp_path, monkeypatch):
    c = TrajectoryCache(2)
    for i in range(4):
        c.put(i, flatten_trajectory(traj(i))[0])
    assert c.ids() == [2, 3] and c.get(0) is None
    assert torch.equal(c.get(3)['gid'], flatten_trajectory(traj(3))[0]['gid'])
    c.put(4, flatten_trajectory(traj(4, t=5))[0])  # a longer trajectory grows the slots, keeps the others
    assert c.ids() == [3, 4] and torch.equal(c.get(3)['actions'], flatten_trajectory(traj(3))[0]['actions'])
    assert torch.equal(c.get(4)['gid'], flatten_trajectory(traj(4, t=5))[0]['gid'])
    buf = TrajectoryReplayBuffer(cache_size=2, sample_window_size=0, auto_save=True,
                                 auto_save_path=str(tmp_path), max_open_files=0)
    buf.add_trajectories([traj(i) for i in range(5)])
    buf.flush()
    assert buf._cache.ids() == [3, 4]
    reads = []
    orig = files_module.load_trajectory
    monkeypatch.setattr(files_module, 'load_trajectory', lambda *a, **k: reads.append(a[0].name) or orig(*a, **k))
    out = buf.sample(300)
    assert sorted(reads) == [f'trajectory_0000000{i}.pt' for i in range(3)]  # each uncached file once
    assert set((out['gid'] // 10000).tolist()) == set(range(5))  # cached and uncached trajectories drawn
    _row_matches(out)  # every sampled row equals its source row, field by field
    buf.close()
    buf.close()  # twice is safe


def _row_matches(out):
    """Every sampled row equals its source row in every field (gid encodes trajectory, t, b)."""
    assert len(out['gid'])
    for n in range(len(out['gid'])):
        g = int(out['gid'][n])
        src = traj(g // 10000)
        assert set(out) == set(src)
        for k in src:
            assert torch.equal(out[k][n], src[k][g // 100 % 100, g % 100]), (k, g)


@pytest.mark.parametrize('fmt', ['pt', 'pkl'])
def test_queued_writes_share_the_cache_copy_and_survive_eviction(tmp_path, monkeypatch, fmt):
    """One copy per trajectory: the writer queue holds cache views; a slot evicted while its
    trajectory still waits for the disk is copied out first, so files and samples stay exact."""
    gate = threading.Event()

    class GatedDisk(TrajectoryFiles):  # a disk that writes nothing until the gate opens
        def put(self, seq, data):
            gate.wait(10)
            super().put(seq, data)
    buf = TrajectoryReplayBuffer(cache_size=2, sample_window_size=0, storage=GatedDisk(tmp_path, fmt, max_open_files=0),
                                 max_pending_writes=8)
    inputs = [traj(i) for i in range(6)]
    buf.add_trajectories(inputs)
    for t in inputs:  # the caller reuses its tensors: the buffer must not alias them
        for v in t.values():
            v.zero_()
    assert buf._cache.ids() == [4, 5] and len(buf._pending) == 6  # 0..3 were evicted while queued
    _row_matches(buf.sample(200))  # pending + cached rows, nothing written yet
    gate.set()
    buf.close()
    one = sum(v.numel() * v.element_size() for v in flatten_trajectory(traj(0))[0].values())
    for i in range(6):
        f = tmp_path / rb.trajectory_filename(i, fmt)
        assert f.stat().st_size < 2 * one + 4096  # one trajectory, not the cache arena
        data = rb.load_trajectory(f, fmt)
        flat = flatten_trajectory(traj(i))[0]
        assert all(torch.equal(data[k], flat[k]) for k in flat)


def test_in_memory_buffer_keeps_exact_copies_past_the_cache(tmp_path):
    buf = TrajectoryReplayBuffer(cache_size=2, sample_window_size=4)  # no auto_save: the window stays in memory
    buf.add_trajectories([traj(i) for i in range(7)])
    assert buf.seqs == [3, 4, 5, 6] and buf._cache.ids() == [5, 6]
    out = buf.sample(300)
    assert set((out['gid'] // 10000).tolist()) == {3, 4, 5, 6}
    _row_matches(out)
    buf.save_checkpoint(str(tmp_path / 'ckpt'))
    sizes = {f.stat().st_size for f in (tmp_path / 'ckpt').glob('trajectory_*.pt')}
    assert len(sizes) == 1  # cached (arena views) and evicted trajectories save alike: no arena inside


def test_concurrent_add_and_sample(tmp_path):
    buf = TrajectoryReplayBuffer(sample_window_size=10, auto_save=True, auto_save_path=str(tmp_path), cache_size=3)
    buf.add_trajectories([traj(0)])
    errors = []

    def producer():
        try:
            for i in range(1, 40):
                buf.add_trajectories([traj(i)])
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    def consumer():
        try:
            for _ in range(200):
                s = buf.sample(32)
                tid = s['gid'] // 10000
                # every row is internally consistent: its actions are its own trajectory's
                i = int(tid[0])
                row = int(s['gid'][0])
                assert torch.equal(s['actions'][0], traj(i)['actions'][row // 100 % 100, row % 100])
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=producer), threading.Thread(target=consumer)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    buf.close()
    assert not errors, errors
    reloaded = TrajectoryReplayBuffer(sample_window_size=0)
    reloaded.load_checkpoint(str(tmp_path))
    assert reloaded.seqs == list(range(40))


def test_errors_name_the_file_or_argument(tmp_path):
    with pytest.raises(RuntimeError, match='empty replay buffer'):
        TrajectoryReplayBuffer().sample(4)
    with pytest.raises(ValueError, match='trajectory_format'):
        TrajectoryReplayBuffer(trajectory_format='npz')
    ck = tmp_path / 'ck'
    buf = TrajectoryReplayBuffer(sample_window_size=0)
    buf.add_trajectories([traj(i) for i in range(3)])
    buf.save_checkpoint(str(ck))
    fresh = TrajectoryReplayBuffer
    with pytest.raises(ValueError, match='local_rank 2 is out of range for world_size 2'):
        fresh().load_checkpoint(str(ck), is_distributed=True, local_rank=2, world_size=2)
    with pytest.raises(BufferFileError, match="format mismatch.*'pt'.*'pkl'"):
        fresh(trajectory_format='pkl').load_checkpoint(str(ck))
    (ck / 'trajectory_00000001.pt').write_bytes(b'garbage')
    r = fresh(sample_window_size=0)
    with pytest.raises(BufferFileError, match='trajectory_00000001.pt is corrupt'):
        r.load_checkpoint(str(ck))
    (ck / 'trajectory_00000001.pt').unlink()
    with pytest.raises(BufferFileError, match='trajectory_00000001.pt listed in .* is missing'):
        fresh().load_checkpoint(str(ck))
    (ck / 'trajectory_index.json').write_text('{"trajectory_ids": [0,')
    with pytest.raises(BufferFileError, match='index file .*trajectory_index.json is corrupt'):
        fresh().load_checkpoint(str(ck))
    (ck / 'trajectory_index.json').unlink()
    with pytest.raises(BufferFileError, match='index file .*trajectory_index.json is missing'):
        fresh().load_checkpoint(str(ck))
    (ck / 'metadata.json').write_text('[]')
    with pytest.raises(BufferFileError, match='metadata file .*metadata.json is corrupt'):
        fresh().load_checkpoint(str(ck))
    with pytest.raises(ValueError, match="field 'b'"):
        TrajectoryReplayBuffer().add_trajectories([{'a': torch.zeros(2, 3), 'b': torch.zeros(3, 3)}])


WRITER = r'''
import sys, torch
sys.path.insert(0, "test")
from test_replay_buffer import traj
from rl_traj_ros.storage.replay_buffer import TrajectoryReplayBuffer
buf = TrajectoryReplayBuffer(auto_save=True, auto_save_path=sys.argv[1], max_pending_writes=2,
                             on_durable=lambda tid: print("acked", tid, flush=True))
i = 0
while True:
    buf.add_trajectories([traj(i, t=40, b=8)])
    i += 1
'''


@pytest.mark.parametrize('failing', ['save_trajectory', 'atomic_write', 'atomic_write_json'])  # file, index, metadata
def test_disk_errors_are_retried_at_the_file_and_at_the_index(tmp_path, monkeypatch, failing):
    """ENOSPC on the trajectory file or on the index after it: retried until it succeeds,
    every trajectory ends up durable, acknowledged once, and equal to what was added."""
    import errno
    calls = {'n': 0}

    def flaky(orig):
        def call(*a, **k):
            calls['n'] += 1
            if calls['n'] in (2, 3):  # the second trajectory's write fails twice
                raise OSError(errno.ENOSPC, 'No space left on device')
            return orig(*a, **k)
        return call

    class FlakyDisk(TrajectoryFiles):
        put = flaky(TrajectoryFiles.put)
    if failing == 'save_trajectory':  # the file: through the buffer's storage part
        storage = FlakyDisk(tmp_path)
    else:  # the index or metadata file after it
        monkeypatch.setattr(index_module, failing, flaky(getattr(index_module, failing)))
        storage = TrajectoryFiles(tmp_path)
    durable = []
    buf = TrajectoryReplayBuffer(cache_size=1, sample_window_size=0, storage=storage, on_durable=durable.append)
    buf._writer.retry_s = 0.05
    buf.add_trajectories([traj(i) for i in range(3)])
    buf.close()
    assert calls['n'] >= 5 and durable == [0, 1, 2]
    loaded = TrajectoryReplayBuffer(sample_window_size=0)
    loaded.load_checkpoint(str(tmp_path))
    assert loaded.seqs == [0, 1, 2]
    for i in range(3):
        data = rb.load_trajectory(tmp_path / rb.trajectory_filename(i, 'pt'), 'pt')
        assert all(torch.equal(data[k], v) for k, v in flatten_trajectory(traj(i))[0].items())


def test_sigkill_mid_write_leaves_a_loadable_buffer(tmp_path):
    d = tmp_path / 'buf'
    p = subprocess.Popen([sys.executable, '-c', WRITER, str(d)], stdout=subprocess.PIPE, text=True,
                         start_new_session=True)
    acked = []
    try:
        while len(acked) < 15:
            line = p.stdout.readline()
            assert line, 'writer died early'
            acked.append(int(line.split()[1]))
        time.sleep(0.05)
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    buf = TrajectoryReplayBuffer(sample_window_size=0)
    buf.load_checkpoint(str(d))
    ids = buf.seqs
    assert set(acked) <= set(ids), 'an acknowledged trajectory was lost'
    assert ids == list(range(len(ids)))
    for tid in ids:  # nothing torn: every listed trajectory loads whole and equals what was added
        data = rb.load_trajectory(d / f'trajectory_{tid:08d}.pt', 'pt')
        flat, _, _ = flatten_trajectory(traj(tid, t=40, b=8))
        assert all(torch.equal(data[k], flat[k]) for k in flat)
    again = TrajectoryReplayBuffer(auto_save=True, auto_save_path=str(d))
    assert again.add_trajectories([traj(99)])[0] >= len(ids)  # appends, never overwrites
    again.close()
    assert not list(d.glob('.*.tmp'))


def test_the_sampler_is_a_part_the_buffer_composes(tmp_path):
    """A sampler decides which rows (``sampler.sample(window, n)``), the buffer gathers them
    (``buffer.get``): here one that takes only the window's newest trajectory, row by row."""
    class NewestOnly:
        def added(self, entry):
            pass

        def sample(self, window, num):
            rows = torch.arange(num) % window[-1].num_samples
            return Draw(torch.full((num,), len(window) - 1), rows, torch.full((num,), window[-1].seq), torch.ones(num))

    buf = TrajectoryReplayBuffer(sample_window_size=3, cache_size=1, sampler=NewestOnly(),
                                 storage=TrajectoryFiles(tmp_path))
    buf.add_trajectories([traj(i) for i in range(5)])
    out = buf.sample(12)
    assert (out['gid'] // 10000).tolist() == [4] * 12
    assert (out['gid'] % 10000).tolist() == [0, 1, 100, 101, 200, 201] * 2  # time-major rows in order
    _row_matches(out)
    which, rows, _, _ = NewestOnly().sample(buf._window(), 4)
    assert torch.equal(buf.get(which - 2, rows)['gid'], out['gid'][:4] - 20000)  # position 0 of the window: #2
    buf.close()


def test_prioritized_sampler_draws_by_priority_and_follows_rows_as_the_window_moves(tmp_path):
    """Rows are named by (seq, row) in a draw; a row whose priority was raised is drawn far more
    often and weighted least; new trajectories start at the highest priority seen; rows that
    left the window are forgotten."""
    sampler = PrioritizedSampler(alpha=1.0, beta=1.0, seed=0)
    buf = TrajectoryReplayBuffer(sample_window_size=3, cache_size=3, sampler=sampler, storage=TrajectoryFiles(tmp_path))
    buf.add_trajectories([traj(i) for i in range(2)])
    out = buf.sample(64, with_index=True)
    assert torch.equal(out['gid'] // 10000, out['index/seq'])  # each row's seq and row name what was gathered
    assert torch.equal(out['index/row'], (out['gid'] // 100 % 100) * 2 + out['gid'] % 100)  # time-major rows
    _row_matches({k: v for k, v in out.items() if not k.startswith('index/')})
    assert torch.equal(out['index/weight'], torch.ones(64))  # equal priorities: a uniform draw, weights 1
    n = buf.total_samples
    seqs, rows = torch.tensor([0] * (n // 2)), torch.arange(n // 2)
    sampler.update_priority(seqs, rows, torch.full((n // 2,), 0.01))            # trajectory 0 settled
    sampler.update_priority(torch.tensor([1]), torch.tensor([3]), torch.tensor([50.0]))  # one surprising row
    out = buf.sample(2000, with_index=True)
    hot = (out['index/seq'] == 1) & (out['index/row'] == 3)
    assert hot.float().mean() > 0.5 and float(out['index/weight'][hot].max()) < float(out['index/weight'].max())
    assert float((out['index/seq'] == 0).float().mean()) < 0.01
    buf.add_trajectories([traj(2)])
    assert float(sampler.priorities[2].min()) == sampler.max_priority >= 50.0  # new rows: drawn soon
    buf.add_trajectories([traj(i) for i in (3, 4)])
    buf.sample(8)
    assert sorted(sampler.priorities) == [2, 3, 4]  # the window's trajectories only
    buf.close()


def test_storage_is_a_part_the_buffer_composes(tmp_path, monkeypatch):
    """Memory or files behind one protocol (put/get/drop/clear): the same rows come back from
    either; the files' LRU keeps at most ``max_open_files`` maps open and re-reads an evicted one."""
    mem = MemoryStorage()
    a = TrajectoryReplayBuffer(seed=4, cache_size=1, sample_window_size=3, storage=mem)
    files = TrajectoryFiles(tmp_path / 'f', max_open_files=2)
    b = TrajectoryReplayBuffer(seed=4, cache_size=1, sample_window_size=3, storage=files)
    assert not a.auto_save and b.auto_save and b.auto_save_path == tmp_path / 'f'
    for buf in (a, b):
        buf.add_trajectories([traj(i) for i in range(5)])
        buf.flush()
    assert len(mem) == 3                                    # the window only: 0 and 1 were dropped
    with pytest.raises(KeyError, match='trajectory 0 is not in this memory storage'):
        mem.get(0)
    sa, sb = a.sample(400), b.sample(400)
    assert all(torch.equal(sa[k], sb[k]) for k in sa)       # same seed, same rows from either backend
    _row_matches(sa)
    assert {g // 10000 for g in sa['gid'].tolist()} == {2, 3, 4}
    assert files.open_files == 2                            # 2 and 3 read from disk (4 is cached), both kept
    reads = []
    orig = files_module.load_trajectory
    monkeypatch.setattr(files_module, 'load_trajectory', lambda *x, **k: reads.append(x[0].name) or orig(*x, **k))
    b.sample(400)
    assert reads == []                                      # served from the open maps
    files.drop(2)
    b.sample(400)
    assert reads == ['trajectory_00000002.pt'] and files.open_files == 2
    with pytest.raises(ValueError, match='max_open_files must be >= 0'):
        TrajectoryFiles(tmp_path / 'g', max_open_files=-1)
    a.close(), b.close()
    assert files.open_files == 0
