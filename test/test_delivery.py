"""The reliability protocol without DDS: identities, outbox, row ledger, exactly-once sink,
collector restarts, bounded memory, durable acknowledgements, resumed buffers."""
import json

import pytest
import torch

from rl_traj_ros.collect.collector import TrajectoryCollector, TrajectoryPlan
from rl_traj_ros.data.identity import TrajectoryId
from rl_traj_ros.data.schema import MalformedPartError, TrajectoryKey
from rl_traj_ros.data.synthetic import SyntheticSpec, make_parts, stored_cells
from rl_traj_ros.delivery.ledger import RowLedger
from rl_traj_ros.delivery.outbox import Outbox, RecentKeys
from rl_traj_ros.delivery.sink import ExactlyOnceSink
from rl_traj_ros.storage import files
from rl_traj_ros.storage.replay_buffer import TrajectoryReplayBuffer

K = [TrajectoryKey(0, 0, 0, 0, c) for c in range(3)]


def parts_of(steps, **kw):
    spec = dict(num_epochs=1, chunks_per_epoch=3, sources=((0, 0), (1, 0)), envs_per_source=2, chunk=2, action_dim=3,
                done_prob=0.3)
    spec.update(kw)
    out = []
    for step in range(steps):
        out += [x for pair in make_parts(SyntheticSpec(**spec, step_id=step, seed=step)) for x in pair]
    return out


def plan(mode, **kw):
    base = dict(mode=mode, num_epochs=1, chunks_per_epoch=3, sources=[(0, 0), (1, 0)], envs_per_source=2)
    base.update(kw)
    return TrajectoryPlan(**base)


# -- outbox ----------------------------------------------------------------------------------------
def test_outbox_releases_a_message_only_when_every_token_was_acknowledged():
    sent, now = [], [0.0]
    box = Outbox(sent.append, resend_after_s=10.0, clock=lambda: now[0])
    box.send('merged', K[:2], 'm1')
    box.send('single', K[2:], 'm2')
    assert box.ack([K[0]]) == [] and len(box) == 2      # half of a merged part: kept
    assert box.ack([K[1], K[2]]) == ['merged', 'single'] or box.ack([]) == []
    assert len(box) == 0 and sent == ['m1', 'm2']


def test_outbox_resends_to_a_new_consumer_and_when_an_ack_is_overdue():
    sent, now = [], [0.0]
    box = Outbox(sent.append, resend_after_s=10.0, clock=lambda: now[0])
    box.send('a', ['a'], 'A')
    assert box.tick(0) == 0                   # nobody listens: nothing to resend to
    assert box.tick(1) == 1                   # a (re)started consumer gets everything again
    assert box.tick(1) == 0
    now[0] = 11.0
    assert box.tick(1) == 1 and sent == ['A', 'A', 'A'] and box.resent == 2
    with pytest.raises(ValueError):
        box.send('b', [], 'B')                # an item nobody can ever acknowledge is a bug


def test_an_item_sent_while_a_new_consumer_is_matched_is_not_resent_to_it():
    sent = []
    box = Outbox(sent.append, resend_after_s=10.0, clock=lambda: 0.0)
    box.tick(0)
    box.send('old', ['old'], 'OLD')               # nobody matched: lost on the wire
    box.send('new', ['new'], 'NEW', matched=1)    # the writer appeared: OLD resent first, NEW once
    assert box.tick(1) == 0 and sent == ['OLD', 'OLD', 'NEW']


def test_recent_keys_is_bounded():
    r = RecentKeys(3)
    for i in range(10):
        r.add(i)
    assert len(r) == 3 and 9 in r and 6 not in r


# -- identity ------------------------------------------------------------------------------------
def test_identity_names_its_cells_and_round_trips():
    ident = TrajectoryId('run', 'pipeline', 3, 0, actor_rank=1, micro_batch=2, rows=((1, 0, 1), (0, 0, 0)))
    keys = [TrajectoryKey(3, 0, 0, 0, 0), TrajectoryKey(3, 0, 1, 0, 0)]
    assert ident.cells(keys) == [(keys[0], 0), (keys[1], 1)]
    assert TrajectoryId.from_json(json.loads(json.dumps(ident.to_json()))) == ident
    with pytest.raises(MalformedPartError, match='repeats a row'):
        TrajectoryId('run', 'rollout', 0, rows=((0, 0, 1), (0, 0, 1)))


# -- the row ledger ------------------------------------------------------------------------------
def test_a_key_is_acknowledged_upstream_only_when_every_row_is_stored():
    led = RowLedger()
    led.joined(K[0], 2)
    a, b = (TrajectoryId('r', 'rollout', 0, -1, 0, 0, shard=i, rows=((0, 0, i),)) for i in (0, 1))
    led.emitted(a, a.cells([K[0]]))
    led.emitted(b, b.cells([K[0]]))
    assert led.settle(a) == []                # shard 0 stored, shard 1 not: the parts stay upstream
    assert led.settle(b) == [K[0]] and led.unsettled() == 0


# -- every mode through the core collector + sink: each cell exactly once -------------------------
MODES = {
    'rollout_1_shard': dict(mode='rollout'),
    'rollout_2_shards': dict(mode='rollout', num_shards=2),
    'pipeline_2_actors': dict(mode='pipeline', num_actors=2),
    'pipeline_micro_batches_shuffled_normalized': dict(mode='pipeline', num_actors=2, micro_batch_size=1,
                                                       shuffle_micro_batches=True, normalize_advantages=True),
    'lerobot_2_envs_only_success': dict(mode='lerobot', only_success=True),
}


def drive(collector, sink, parts, acks=True):
    for part in parts:
        for o in collector.push(part):
            sink.offer(o.trajectory, block=True)
        if acks:
            sink.buffer.flush()
            collector.acknowledge(sink.take_acks())


@pytest.mark.parametrize('name', list(MODES))
def test_every_mode_stores_every_row_exactly_once(tmp_path, name):
    cfg = MODES[name]
    p = plan(**cfg)
    parts = parts_of(3)
    col = TrajectoryCollector(p, 'run-a')
    buf = TrajectoryReplayBuffer(auto_save=True, auto_save_path=str(tmp_path))
    sink = ExactlyOnceSink(buf)
    drive(col, sink, parts)
    buf.close()
    cells = stored_cells(tmp_path)
    assert len(cells) == len(set(cells))                                    # nothing duplicated
    joined = {(k, b) for k in {s.key for x in parts for s in x.sources} for b in range(2)}
    if cfg['mode'] != 'lerobot':
        assert set(cells) == joined                                          # nothing lost
        assert col.ledger.unsettled() == 0 and sink.counters['duplicates'] == 0
    else:  # every joined row is stored, dropped on purpose (a failed episode) or in an open episode
        open_cells = set(col.open_cells())
        assert set(cells) | open_cells <= joined and not set(cells) & open_cells
        assert len(cells) + col.stats['dropped_rows'] + len(open_cells) == len(joined)
        assert cells and col.stats['dropped_episodes'] > 0  # both branches of only_success were taken
        assert col.ledger.unsettled() == len({k for k, _ in open_cells})  # only open episodes hold rows back
    # a genuine re-delivery of everything is stored once: the sink acknowledges, stores nothing
    buf2 = TrajectoryReplayBuffer(auto_save=True, auto_save_path=str(tmp_path))
    sink2 = ExactlyOnceSink(buf2)
    col2 = TrajectoryCollector(plan(**cfg), 'run-a')
    drive(col2, sink2, parts)
    buf2.close()
    assert sink2.counters['stored'] == 0 and sink2.counters['duplicates'] == sink.counters['stored']
    assert sorted(stored_cells(tmp_path)) == sorted(cells)


def test_a_new_run_into_an_existing_buffer_appends(tmp_path):
    parts = parts_of(1)
    for run in ('run-1', 'run-2'):  # same step ids, same keys: a different run
        buf = TrajectoryReplayBuffer(auto_save=True, auto_save_path=str(tmp_path))
        drive(TrajectoryCollector(plan('rollout', num_shards=2), run), ExactlyOnceSink(buf), parts)
        buf.close()
    buf = TrajectoryReplayBuffer(auto_save=True, auto_save_path=str(tmp_path))
    assert len(buf) == 8 and len({i for i, _ in buf.stored_identities()}) == 8  # 2 runs x 2 sources x 2 shards
    buf.close()


def test_collector_restart_mid_run_loses_and_duplicates_nothing(tmp_path):
    """The collector dies with acknowledged and unacknowledged outputs; the policy node resends
    every part whose key was not acknowledged upstream; a new collector with the same run id
    rebuilds the same identities, the sink stores only what it lacked."""
    p = plan('pipeline', num_actors=2, micro_batch_size=1, shuffle_micro_batches=True)
    parts = parts_of(4)
    buf = TrajectoryReplayBuffer(auto_save=True, auto_save_path=str(tmp_path))
    sink = ExactlyOnceSink(buf)
    upstream = {}  # what the policy node still holds: key -> parts
    for x in parts:
        upstream.setdefault(x.sources[0].key, []).append(x)
    col = TrajectoryCollector(p, 'run-x')
    half = len(parts) // 2 + 3
    for i, x in enumerate(parts[:half]):
        for o in col.push(x):
            sink.offer(o.trajectory, block=True)
        if i == 13:  # step 0's acknowledgements arrive before the crash, step 1's never do
            buf.flush()
            col.acknowledge(sink.take_acks())
            for k in col.take_settled():
                upstream.pop(k)
    sink.take_acks()  # the collector dies: these acknowledgements are lost with it
    col = TrajectoryCollector(plan('pipeline', num_actors=2, micro_batch_size=1, shuffle_micro_batches=True),
                              'run-x')
    resent = [x for k in sorted(upstream) for x in upstream[k]]
    drive(col, sink, resent + [x for x in parts[half:] if x.sources[0].key not in upstream])
    buf.close()
    cells = stored_cells(tmp_path)
    every = {(s.key, b) for x in parts for s in x.sources for b in range(2)}
    assert len(cells) == len(set(cells)) and set(cells) == every
    assert sink.counters['duplicates'] > 0 and col.ledger.unsettled() == 0


def test_lerobot_restart_mid_episode_rebuilds_no_duplicate_rows(tmp_path):
    """An env-0 episode was stored while env 1's episode over the same chunks is open; the
    collector dies. The resent chunks rebuild the tail of the stored episode: every row of it
    is stored already, so it is a re-delivery, not new data."""
    p = plan('lerobot', sources=[(0, 0)])
    parts = parts_of(3, sources=((0, 0),), done_prob=0.4)
    buf = TrajectoryReplayBuffer(auto_save=True, auto_save_path=str(tmp_path))
    sink = ExactlyOnceSink(buf)
    upstream = {}
    for x in parts:
        upstream.setdefault(x.sources[0].key, []).append(x)
    col = TrajectoryCollector(p, 'r')
    for x in parts[:10]:
        for o in col.push(x):
            sink.offer(o.trajectory, block=True)
        buf.flush()
        col.acknowledge(sink.take_acks())
        for k in col.take_settled():
            upstream.pop(k)
    col = TrajectoryCollector(plan('lerobot', sources=[(0, 0)]), 'r')
    resent = [x for k in sorted(upstream) for x in upstream[k]]
    drive(col, sink, resent)
    buf.close()
    cells = stored_cells(tmp_path)
    assert len(cells) == len(set(cells)) and sink.counters['rejected'] == 0


def test_partial_overlap_is_rejected_loudly_and_not_acknowledged(tmp_path):
    buf = TrajectoryReplayBuffer(auto_save=True, auto_save_path=str(tmp_path))
    sink = ExactlyOnceSink(buf)
    col = TrajectoryCollector(plan('rollout', sources=[(0, 0)]), 'r')
    outs = [o for x in parts_of(1, sources=((0, 0),)) for o in col.push(x)]
    (o,) = outs
    assert sink.offer(o.trajectory).verdict == 'stored'
    half = o.trajectory.select_envs(0, 1)  # claims rows (0, 1) under another identity but holds one stored row
    half.identity = TrajectoryId('r', 'rollout', 0, -1, 0, 0, shard=7, rows=((0, 0, 0),))
    half.keys = o.trajectory.keys
    half.keys = half.keys[:1] + [TrajectoryKey(5, 0, 0, 0, 0)]
    got = sink.offer(half)
    assert got.verdict == 'rejected' and 'shares 1 of its 2 rows' in got.reason
    buf.flush()
    assert sink.take_acks() == [o.identity]
    buf.close()


# -- bounded memory --------------------------------------------------------------------------------
def test_long_run_memory_is_flat_after_warm_up(tmp_path):
    """10,000+ chunks through collector, sink and buffer: the joiner's completed keys, the
    ledger and the sink's identity index stay bounded; the Python heap stops growing."""
    p = TrajectoryPlan(mode='rollout', num_epochs=1, chunks_per_epoch=25, sources=[(0, 0)], envs_per_source=2)
    col = TrajectoryCollector(p, 'long')
    col.joiner._retired.capacity = 200
    buf = TrajectoryReplayBuffer(auto_save=True, auto_save_path=str(tmp_path), cache_size=2, sample_window_size=10)
    sink = ExactlyOnceSink(buf, window=50)
    spec = dict(num_epochs=1, chunks_per_epoch=25, sources=((0, 0),), envs_per_source=2, chunk=1, action_dim=2,
                state_dim=2, done_prob=0.1)
    template = [x for pair in make_parts(SyntheticSpec(**spec)) for x in pair]

    def step(i):
        import dataclasses
        for x in template:
            src = [dataclasses.replace(s, key=dataclasses.replace(s.key, step_id=i)) for s in x.sources]
            yield dataclasses.replace(x, sources=src)
    import gc
    import psutil
    proc = psutil.Process()
    rss = []
    for i in range(420):  # 10,500 chunks
        drive(col, sink, step(i), acks=False)
        if i % 4 == 3:
            buf.flush()
            col.acknowledge(sink.take_acks())
            col.take_settled()
        if i in (100, 260, 419):
            buf.flush()
            gc.collect()
            rss.append(proc.memory_info().rss / 2 ** 20)
    buf.close()
    print(f'\n10,500 chunks: RSS after warm-up (2,500) {rss[0]:.1f} MB, at 6,500 chunks {rss[1]:.1f} MB, at 10,500 '
          f'{rss[2]:.1f} MB; completed keys held {col.joiner.completed_keys_held()}, sink ids {sink.remembered()}, '
          f'unsettled keys {col.ledger.unsettled()}')
    assert col.joiner.completed_keys_held() <= 200 + 100 and sink.remembered() <= 50 and col.ledger.unsettled() == 0
    # the buffer's own index grows by one small entry per trajectory (320 after warm-up); nothing else may
    assert rss[2] - rss[0] < 8.0, rss


# -- durability ------------------------------------------------------------------------------------
def test_acknowledgement_comes_after_file_index_and_directory_are_on_disk(tmp_path, monkeypatch):
    events = []
    real = files.fsync_dir
    monkeypatch.setattr(files, 'fsync_dir', lambda d: (events.append(('fsync_dir', sorted(
        p.name for p in d.iterdir() if not p.name.startswith('.')))), real(d)))
    buf = TrajectoryReplayBuffer(auto_save=True, auto_save_path=str(tmp_path))
    sink = ExactlyOnceSink(buf)
    col = TrajectoryCollector(plan('rollout', sources=[(0, 0)]), 'r')
    outs = [o for x in parts_of(1, sources=((0, 0),)) for o in col.push(x)]
    real_durable = buf.on_durable
    buf.on_durable = lambda tid: (events.append(('ack', tid)), real_durable(tid))
    sink.offer(outs[0].trajectory)
    buf.close()
    ack = events.index(('ack', 0))
    synced = [names for what, names in events[:ack] if what == 'fsync_dir']
    assert any('trajectory_00000000.pt' in n for n in synced)                      # the file's rename
    assert any('trajectory_index.json' in n and 'metadata.json' in n for n in synced)  # the index's
    assert events[ack - 1][0] == 'fsync_dir'


# -- resumed buffer --------------------------------------------------------------------------------
def test_a_buffer_resumed_from_a_checkpoint_into_another_directory_stays_loadable(tmp_path):
    def traj(i):
        g = torch.Generator().manual_seed(i)
        return {'obs': torch.randn(3, 2, 4, generator=g), 'dones': torch.zeros(3, 2, 1, dtype=torch.bool)}
    with TrajectoryReplayBuffer(auto_save=True, auto_save_path=str(tmp_path / 'run1'), sample_window_size=2) as b:
        b.add_trajectories([traj(i) for i in range(5)])
        b.save_checkpoint(str(tmp_path / 'ck'))
    resumed = TrajectoryReplayBuffer(auto_save=True, auto_save_path=str(tmp_path / 'run2'), sample_window_size=0,
                                     seed=5)
    resumed.load_checkpoint(str(tmp_path / 'ck'))
    resumed.add_trajectories([traj(9)])
    want = resumed.sample(64)
    resumed.close()
    again = TrajectoryReplayBuffer(sample_window_size=0, seed=5)
    again.load_checkpoint(str(tmp_path / 'run2'))  # failed before: the checkpoint's files were missing
    assert again.seqs == [3, 4, 5]
    got = again.sample(64)
    assert all(torch.equal(got[k], want[k]) for k in want)
    # a directory holding a different file of the same name is not overwritten
    clash = TrajectoryReplayBuffer(auto_save=True, auto_save_path=str(tmp_path / 'run3'))
    clash.add_trajectories([traj(1), traj(1), traj(1), traj(1)])
    clash.flush()
    with pytest.raises(files.BufferFileError, match='resume into an empty directory'):
        clash.load_checkpoint(str(tmp_path / 'ck'))
    clash.close()


def test_a_redelivery_before_the_first_copy_is_durable_is_not_acknowledged_early(tmp_path):
    import threading
    gate = threading.Event()

    class SlowDisk(files.TrajectoryFiles):  # nothing reaches the disk until the gate opens
        def put(self, seq, data):
            gate.wait(10)
            super().put(seq, data)
    buf = TrajectoryReplayBuffer(storage=SlowDisk(tmp_path))
    sink = ExactlyOnceSink(buf)
    col = TrajectoryCollector(plan('rollout', sources=[(0, 0)]), 'r')
    (o,) = [o for x in parts_of(1, sources=((0, 0),)) for o in col.push(x)]
    assert sink.offer(o.trajectory).verdict == 'stored'
    assert sink.offer(o.trajectory).verdict == 'duplicate'   # resent while the disk is slow
    assert sink.take_acks() == []                             # nothing acknowledged before it is durable
    gate.set()
    buf.flush()
    assert sink.take_acks() == [o.identity]                   # once, from the durable callback
    buf.close()
