"""TrajectoryReplayBuffer: whole [T, B, ...] trajectories on disk, sampled per chunk (spec §6).

Composed like torchrl's buffers from small parts: an index (``trajectory_index.json`` +
``metadata.json``, kept apart from the data), a storage of one file per trajectory, a FIFO
cache of the newest flattened trajectories, one writer thread with a bounded queue, and a
window sampler. Trajectories stay whole (many episodes each); sampling flattens them
time-major to ``[T*B, ...]`` and draws uniformly over the samples of the window.

Delivery guarantee: ``add_trajectories`` returns once a trajectory is queued; it is
*acknowledged* (durable) once ``flush()`` returned or ``on_durable`` was called for it.
Files and index are written atomically and the index only lists complete files, so after a
crash at any moment the directory loads and holds every acknowledged trajectory.
"""
from __future__ import annotations

import json
import threading
import uuid as uuidlib
from collections import OrderedDict
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence, Union

import torch

from .background import BackgroundWriter, QueueFull
from .storage import (FORMATS, BufferFileError, atomic_write, atomic_write_json, copy_file_durably, load_trajectory,
                      plain_copy, read_json, save_trajectory, trajectory_filename)
from .delivery import TrajectoryId
from .schema import TrajectoryKey
from .trajectory import Trajectory

INDEX_FILE = 'trajectory_index.json'
METADATA_FILE = 'metadata.json'
BUFFER_VERSION = 1

TrajectoryLike = Union[Trajectory, dict]


class TrajectoryEntry:
    """What the index knows of one trajectory without opening its file.

    The entry's index record is serialized once, when it is created or read, and kept as
    JSON text: the index file is rewritten after every write by joining these texts (no
    re-serialization of every entry), and the in-memory index costs a few hundred bytes per
    trajectory instead of Python lists of its keys and rows. ``keys``/``identity`` parse it.
    """

    __slots__ = ('uuid', 'trajectory_id', 'num_samples', 'shape', 'max_episode_length', 'directory', '_text')

    def __init__(self, uuid: str, trajectory_id: int, num_samples: int, shape: list[int], max_episode_length: int,
                 directory: Optional[Path] = None, keys: Optional[list[list[int]]] = None,
                 identity: Optional[dict] = None):
        self.uuid, self.trajectory_id, self.num_samples = uuid, trajectory_id, num_samples
        self.shape, self.max_episode_length = shape, max_episode_length   # [T, B]; longest run between dones
        self.directory = directory  # where its file lives; None: memory only
        d = {'uuid': uuid, 'trajectory_id': trajectory_id, 'num_samples': num_samples, 'shape': shape,
             'max_episode_length': max_episode_length}
        if keys is not None:
            d['keys'] = keys            # TrajectoryKeys it holds (collector output): audit
        if identity is not None:
            d['identity'] = identity    # its TrajectoryId: what the writer dedupes on
        self._text = json.dumps(d, sort_keys=True, separators=(',', ':'))

    def to_json(self) -> dict:
        return json.loads(self._text)

    def json_text(self) -> str:
        return self._text

    @property
    def keys(self) -> Optional[list[list[int]]]:
        return self.to_json().get('keys') if '"keys"' in self._text else None

    @property
    def identity(self) -> Optional[dict]:
        return self.to_json().get('identity') if '"identity"' in self._text else None

    @classmethod
    def from_json(cls, d: dict, directory: Path, where: Path) -> 'TrajectoryEntry':
        try:
            return cls(str(d['uuid']), int(d['trajectory_id']), int(d['num_samples']), [int(x) for x in d['shape']],
                       int(d['max_episode_length']), directory,
                       [list(map(int, k)) for k in d['keys']] if 'keys' in d else None,
                       dict(d['identity']) if 'identity' in d else None)
        except (KeyError, TypeError, ValueError) as e:
            raise BufferFileError(f'index file {where} has a corrupt entry {d!r}: {e}') from None


# -- flattening ---------------------------------------------------------------------------------
def flatten_trajectory(traj: TrajectoryLike) -> tuple[dict[str, torch.Tensor], list[int], int]:
    """[T, B, ...] fields -> [T*B, ...] (time-major), plus [T, B] and the max episode length.

    A ``Trajectory``'s boundary fields ([T+E, B, ...]) are aligned to chunks first: each
    chunk keeps its post-chunk ``dones``/``terminations``/``truncations``, its ``prev_values``
    V(s_t), and gains ``next_values`` V(s_t+1), so every row is a complete transition.
    """
    if isinstance(traj, Trajectory):
        fields = _chunk_aligned(traj)
    elif isinstance(traj, dict):
        fields = dict(traj)
    else:
        raise TypeError(f'expected a Trajectory or a dict of [T, B, ...] tensors, got {type(traj).__name__}')
    if not fields:
        raise ValueError('trajectory has no fields')
    t_b = None
    for k, v in fields.items():
        if not isinstance(v, torch.Tensor) or v.dim() < 2:
            raise ValueError(f'trajectory field {k!r} must be a tensor of shape [T, B, ...]')
        if t_b is None:
            t_b = list(v.shape[:2])
        elif list(v.shape[:2]) != t_b:
            raise ValueError(f'trajectory field {k!r} has leading shape {list(v.shape[:2])}, expected {t_b}')
    t, b = t_b
    # views where possible: the buffer copies them once, into the cache arena or a clone of its own
    flat = {k: v.detach().to('cpu').reshape(t * b, *v.shape[2:]) for k, v in fields.items()}
    return flat, t_b, _max_episode_length(fields.get('dones'), t)


def _chunk_aligned(traj: Trajectory) -> dict[str, torch.Tensor]:
    e, l = traj.num_epochs, traj.chunks_per_epoch
    after = torch.tensor([ep * (l + 1) + 1 + c for ep in range(e) for c in range(l)])
    before = after - 1
    out = {}
    for name, v in traj.to_dict().items():
        if name in ('dones', 'terminations', 'truncations'):
            out[name] = v.index_select(0, after)
        elif name == 'prev_values':
            out[name] = v.index_select(0, before)
            out['next_values'] = v.index_select(0, after)
        elif isinstance(v, torch.Tensor):
            out[name] = v
    return out


def trajectory_from_stored(flat: dict[str, torch.Tensor], shape: Sequence[int], keys: Sequence[TrajectoryKey],
                           identity: Optional[TrajectoryId] = None) -> Trajectory:
    """Inverse of the storage layout (``flatten_trajectory`` of a ``Trajectory``): ``[T*B, ...]``
    rows back to time-major fields and chunk-aligned boundaries back to ``[T+E, B, ...]``
    (``prev_values`` exactly, from each chunk's V(s_t) and the last chunk's V(s_t+1)). The done
    flags before an epoch's first chunk are not stored and come back False: no estimator reads
    them (they take each chunk's end)."""
    t, b = int(shape[0]), int(shape[1])
    e = max(len({k.epoch_id for k in keys}), 1)
    l = t // e
    fields = {k: v.reshape(t, b, *v.shape[1:]) for k, v in flat.items()}
    nxt = fields.pop('next_values', None)
    if nxt is None:
        raise ValueError('stored trajectory has no next_values: it was not written from a Trajectory')
    for name in ('dones', 'terminations', 'truncations', 'prev_values'):
        v = fields[name]
        parts = []
        for ep in range(e):
            chunk = v[ep * l:(ep + 1) * l]
            if name == 'prev_values':
                parts += [chunk, nxt[(ep + 1) * l - 1:(ep + 1) * l]]
            else:
                parts += [torch.zeros_like(chunk[:1]), chunk]
        fields[name] = torch.cat(parts)
    traj = Trajectory.from_dict(fields, e, list(keys))
    traj.identity = identity
    return traj


def read_stored_trajectories(directory: Union[str, Path], want: Callable[[TrajectoryId], bool]) -> list[Trajectory]:
    """The trajectories a (possibly live) writer stored under ``directory`` whose identity
    ``want`` accepts, in index order. Read-only: the index is replaced atomically, so a reader
    sees some complete version of it, and every listed file is complete (nothing is adopted,
    cleaned or locked). What a restarted consumer (the learner) uses to catch up on the rows it
    missed while it was down."""
    directory = Path(directory)
    if not (directory / INDEX_FILE).exists():
        return []
    meta = read_json(directory / METADATA_FILE, 'metadata')
    index = read_json(directory / INDEX_FILE, 'index')
    out = []
    for tid in index.get('trajectory_ids', []):
        rec = index['trajectories'][str(tid)]
        if 'identity' not in rec:
            continue
        ident = TrajectoryId.from_json(rec['identity'])
        if not want(ident):
            continue
        flat = load_trajectory(directory / trajectory_filename(int(tid), meta['trajectory_format']),
                               meta['trajectory_format'], mmap=False)
        out.append(trajectory_from_stored(flat, rec['shape'], [TrajectoryKey.from_tuple(k) for k in rec['keys']],
                                          ident))
    return out


def _max_episode_length(dones: Optional[torch.Tensor], t: int) -> int:
    if dones is None:
        return t
    d = dones.reshape(dones.shape[0], dones.shape[1], -1).any(-1)  # [T, B]
    best = 0
    for b in range(d.shape[1]):
        run = 0
        for x in d[:, b].tolist():
            run += 1
            if x:
                best, run = max(best, run), 0
        best = max(best, run)
    return best


def _same_content(a: Path, b: Path) -> bool:
    if a.resolve() == b.resolve():
        return True
    if a.stat().st_size != b.stat().st_size:
        return False
    with open(a, 'rb') as fa, open(b, 'rb') as fb:
        while True:
            x, y = fa.read(1 << 20), fb.read(1 << 20)
            if x != y:
                return False
            if not x:
                return True


def locate(idx: torch.Tensor, sizes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Global sample indices -> (trajectory position, row inside it), vectorised."""
    ends = torch.cumsum(sizes, 0)
    which = torch.bucketize(idx, ends, right=True)
    return which, idx - (ends - sizes)[which]


# -- parts ---------------------------------------------------------------------------------------
class TrajectoryCache:
    """FIFO cache of the newest flattened trajectories, stored in one arena per field.

    Slot ``i`` of the arena holds one trajectory's rows at ``[i*cap, i*cap + n)``, so rows of
    any number of cached trajectories are gathered with ONE ``index_select`` per field
    instead of one per trajectory and field (per-op overhead dominates small batches).
    Arena pages are touched only as slots fill, so an unused capacity costs no memory.
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._slots: OrderedDict[int, tuple[int, int]] = OrderedDict()  # tid -> (slot, rows)
        self._free: list[int] = list(range(capacity))[::-1]
        self._arena: dict[str, torch.Tensor] = {}
        self._cap = 0  # rows per slot

    def _schema_matches(self, data: dict) -> bool:
        return (set(data) == set(self._arena) and
                all(v.dtype == self._arena[k].dtype and v.shape[1:] == self._arena[k].shape[1:] for k, v in data.items()))

    def put(self, tid: int, data: dict,
            on_evict: Optional[Callable[[int, dict], None]] = None) -> Optional[dict[str, torch.Tensor]]:
        """Copy ``data`` into a slot; returns the slot's views (None without capacity).

        ``on_evict(tid, views)`` runs before an evicted slot is overwritten, so an owner still
        holding those views (a trajectory queued for the disk) can take a copy first."""
        if self.capacity <= 0:
            return None
        rows = next(iter(data.values())).shape[0]
        if not self._arena or not self._schema_matches(data):
            self.clear()  # new field layout: start a fresh arena
            self._arena = {k: torch.empty((self.capacity * rows, *v.shape[1:]), dtype=v.dtype) for k, v in data.items()}
            self._cap = rows
        elif rows > self._cap:
            self._grow(rows)
        if not self._free:
            old_tid = next(iter(self._slots))  # evict the oldest
            if on_evict is not None:
                on_evict(old_tid, self.get(old_tid))
            _, (slot, _) = self._slots.popitem(last=False)
            self._free.append(slot)
        slot = self._free.pop()
        base = slot * self._cap
        for k, v in data.items():
            self._arena[k][base:base + rows].copy_(v)
        self._slots[tid] = (slot, rows)
        return self.get(tid)

    def _grow(self, rows: int) -> None:
        old, old_cap = self._arena, self._cap
        self._arena = {k: torch.empty((self.capacity * rows, *v.shape[1:]), dtype=v.dtype) for k, v in old.items()}
        for slot, n in self._slots.values():
            for k in old:
                self._arena[k][slot * rows:slot * rows + n].copy_(old[k][slot * old_cap:slot * old_cap + n])
        self._cap = rows

    def arena_rows(self, tid: int) -> Optional[int]:
        """First arena row of a cached trajectory, or None."""
        hit = self._slots.get(tid)
        return None if hit is None else hit[0] * self._cap

    def get(self, tid: int) -> Optional[dict]:
        hit = self._slots.get(tid)
        if hit is None:
            return None
        base = hit[0] * self._cap
        return {k: v[base:base + hit[1]] for k, v in self._arena.items()}

    @property
    def arena(self) -> dict[str, torch.Tensor]:
        return self._arena

    def ids(self) -> list[int]:
        return list(self._slots)

    def clear(self) -> None:
        self._slots.clear()
        self._free = list(range(self.capacity))[::-1]
        self._arena = {}
        self._cap = 0


class BufferFull(QueueFull):
    """``add_trajectories(block=False)`` found the writer queue full (the disk is behind)."""


# -- the buffer ----------------------------------------------------------------------------------
class TrajectoryReplayBuffer:
    """Trajectory-level replay buffer with windowed sampling, checkpoints and sharded loading.

    ``enable_cache``/``cache_size``: FIFO cache of the newest flattened trajectories; disk
    reads of the others are memory-mapped (``pt``) so ``sample`` reads only sampled rows.
    ``sample_window_size``: sample from the last N trajectories (0 = all). Without
    ``auto_save`` nothing goes to disk and only the window is kept in memory.
    ``max_pending_writes``: trajectories queued for the writer before ``add`` blocks.
    ``max_open_files``: memory-mapped trajectory files kept open between ``sample`` calls.
    ``on_durable(id)`` runs on the writer thread once a trajectory's file and index are on disk
    (what a node acknowledges); ``before_write(id)`` runs before each write (throttling, tests).
    """

    def __init__(self, seed: int = 1234, enable_cache: bool = True, cache_size: int = 5,
                 sample_window_size: int = 100, auto_save: bool = False, auto_save_path: Optional[str] = None,
                 trajectory_format: str = 'pt', max_pending_writes: int = 4, max_open_files: int = 256,
                 on_durable: Optional[Callable[[int], None]] = None,
                 before_write: Optional[Callable[[int], None]] = None):
        if trajectory_format not in FORMATS:
            raise ValueError(f'trajectory_format must be one of {FORMATS}, got {trajectory_format!r}')
        if sample_window_size < 0 or cache_size < 0:
            raise ValueError('sample_window_size and cache_size must be >= 0')
        if auto_save and not auto_save_path:
            raise ValueError('auto_save=True needs auto_save_path')
        self.seed = seed
        self.enable_cache = enable_cache
        self.cache_size = cache_size
        self.sample_window_size = sample_window_size
        self.auto_save = auto_save
        self.auto_save_path = Path(auto_save_path) if auto_save_path else None
        self.trajectory_format = trajectory_format
        self.max_open_files = max_open_files
        self.on_durable = on_durable
        self.before_write = before_write
        self._lock = threading.RLock()
        self._generator = torch.Generator().manual_seed(seed)
        self._entries: list[TrajectoryEntry] = []          # insertion order
        self._memory: dict[int, dict] = {}                   # no auto_save: the kept trajectories
        self._pending: dict[int, dict] = {}                  # queued for the writer, not yet durable
        self._in_arena: set[int] = set()                     # ids whose _pending/_memory data are cache views
        self._cache = TrajectoryCache(cache_size if enable_cache else 0)
        self._open: OrderedDict[int, dict] = OrderedDict()   # mmap handles (LRU)
        self._counter = 0
        self._total_samples = 0
        self._closed = False
        self._writer: Optional[BackgroundWriter] = None
        if auto_save:
            self.auto_save_path.mkdir(parents=True, exist_ok=True)
            self._adopt_existing(self.auto_save_path)
            # one writer thread; disk errors (full, I/O) are retried, so nothing queued is lost
            self._writer = BackgroundWriter(self._write_one, max_pending_writes,
                                            'replay-buffer-writer', retry_os_errors=True)

    # -- size ----------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._entries)

    @property
    def total_samples(self) -> int:
        return self._total_samples

    def stored_identities(self, newest: int = 0) -> list[tuple[TrajectoryId, list[TrajectoryKey]]]:
        """(identity, chunk keys) of the newest ``newest`` indexed trajectories that have an
        identity (0 = all): what an ``ExactlyOnceSink`` restores on start."""
        with self._lock:
            records = [e.to_json() for e in (self._entries[-newest:] if newest else self._entries)]
        return [(TrajectoryId.from_json(r['identity']), [TrajectoryKey.from_tuple(k) for k in r.get('keys', [])])
                for r in records if 'identity' in r]

    @property
    def trajectory_ids(self) -> list[int]:
        return [e.trajectory_id for e in self._entries]

    # -- adding ----------------------------------------------------------------------------------
    @property
    def write_stalled(self) -> Optional[OSError]:
        """The disk error the writer is retrying (e.g. ENOSPC), or None."""
        return self._writer.stalled if self._writer is not None else None

    def add_trajectories(self, trajectories: Iterable[TrajectoryLike], block: bool = True) -> list[int]:
        """Queue trajectories; returns their ids. Blocks while the writer queue is full, or with
        ``block=False`` raises ``BufferFull`` before taking anything."""
        self._check_open()
        ids = []
        for traj in trajectories:
            if not block and self._writer is not None and self._writer.full():
                raise BufferFull('replay buffer writer queue is full')
            flat, shape, max_len = flatten_trajectory(traj)
            with self._lock:
                tid = self._counter
                self._counter += 1
                keys = [list(k.as_tuple()) for k in traj.keys] if isinstance(traj, Trajectory) and traj.keys else None
                ident = getattr(traj, 'identity', None)
                entry = TrajectoryEntry(str(uuidlib.uuid4()), tid, shape[0] * shape[1], shape, max_len,
                                        self.auto_save_path if self.auto_save else None, keys,
                                        ident.to_json() if ident is not None else None)
                self._entries.append(entry)
                self._total_samples += entry.num_samples
                # ONE copy of the caller's tensors: into the cache arena, whose views the writer
                # queue / in-memory store then share (detached on eviction), or else a clone
                views = self._cache.put(tid, flat, self._detach)
                if views is not None:
                    flat = views
                    self._in_arena.add(tid)
                else:
                    flat = {k: v.clone() for k, v in flat.items()}
                if self.auto_save:
                    self._pending[tid] = flat
                else:
                    self._memory[tid] = flat
                    self._trim_memory()
            if self._writer is not None:
                self._writer.submit(tid)
            ids.append(tid)
        return ids

    def _trim_memory(self) -> None:
        """Without auto_save only the sampling window can ever be sampled: keep just that."""
        if self.sample_window_size and len(self._entries) > self.sample_window_size:
            for e in self._entries[:-self.sample_window_size]:
                self._memory.pop(e.trajectory_id, None)
                self._total_samples -= e.num_samples
            self._entries = self._entries[-self.sample_window_size:]

    def _detach(self, tid: int, views: dict) -> None:
        """The cache is about to reuse ``tid``'s slot: data still owned elsewhere gets a copy."""
        if tid in self._in_arena:
            self._in_arena.discard(tid)
            for owned in (self._pending, self._memory):
                if tid in owned:
                    owned[tid] = {k: v.clone() for k, v in views.items()}

    def _write_one(self, tid: int) -> None:
        """File, then index. Re-run as a whole when a disk error is retried: a file already
        written (the index write failed) is not written again."""
        if self.before_write is not None:
            self.before_write(tid)
        with self._lock:  # a private copy: the slot may be reused while the file is written
            flat = self._pending.get(tid)
            if flat is not None and tid in self._in_arena:
                self._in_arena.discard(tid)
                flat = self._pending[tid] = {k: plain_copy(v) for k, v in flat.items()}
        if flat is not None:
            save_trajectory(self.auto_save_path / trajectory_filename(tid, self.trajectory_format), flat,
                            self.trajectory_format)
        with self._lock:
            self._pending.pop(tid, None)
            durable = [e for e in self._entries if e.trajectory_id not in self._pending]
            counter = self._counter
        # index + metadata only after the file is complete; they list durable files only
        self._write_index(self.auto_save_path, durable, counter)
        if self.on_durable is not None:
            self.on_durable(tid)

    def flush(self) -> None:
        """Wait until every queued trajectory is on disk (acknowledged); re-raise writer errors."""
        if self._writer is not None:
            self._writer.join()
            err = self._writer.take_error()
            if err is not None:
                raise RuntimeError(f'replay buffer writer failed: {err}') from err

    # -- sampling --------------------------------------------------------------------------------
    def _window(self) -> list[TrajectoryEntry]:
        w = self.sample_window_size
        return self._entries[-w:] if w and len(self._entries) > w else list(self._entries)

    def sample(self, num_chunks: int) -> dict[str, torch.Tensor]:
        """``num_chunks`` rows drawn uniformly over the window's samples: {field: [n, ...]}."""
        self._check_open()
        if self._writer is not None and self._writer.error is not None:
            self.flush()
        with self._lock:
            window = self._window()
            if not window:
                raise RuntimeError('cannot sample from an empty replay buffer')
            sizes = torch.tensor([e.num_samples for e in window])
            idx = torch.randint(int(sizes.sum()), (num_chunks,), generator=self._generator)
            which, rows = locate(idx, sizes)
            # cached rows: one gather per field from the cache arena
            starts = torch.tensor([-1 if (a := self._cache.arena_rows(e.trajectory_id)) is None else a
                                   for e in window])
            base = starts[which]
            hit = base >= 0
            out: dict[str, torch.Tensor] = {}
            if bool(hit.all()):
                return {k: v.index_select(0, base + rows) for k, v in self._cache.arena.items()}
            if bool(hit.any()):
                pos, src = hit.nonzero().squeeze(1), (base + rows)[hit]
                for k, v in self._cache.arena.items():
                    out[k] = torch.empty((num_chunks, *v.shape[1:]), dtype=v.dtype)
                    out[k].index_copy_(0, pos, v.index_select(0, src))
            # the others: each needed trajectory read (memory-mapped) at most once
            miss = ~hit
            for p in torch.unique(which[miss]).tolist():
                mask = (miss & (which == p)).nonzero().squeeze(1)
                data = self._fetch(window[p])
                r = rows[mask]
                for k, v in data.items():
                    if k not in out:
                        out[k] = torch.empty((num_chunks, *v.shape[1:]), dtype=v.dtype)
                    out[k].index_copy_(0, mask, v.index_select(0, r))
            return out

    def _fetch(self, e: TrajectoryEntry) -> dict:
        tid = e.trajectory_id
        for source in (self._cache.get(tid), self._pending.get(tid), self._memory.get(tid), self._open.get(tid)):
            if source is not None:
                if tid in self._open:
                    self._open.move_to_end(tid)
                return source
        if e.directory is None:
            raise RuntimeError(f'trajectory {tid} is neither in memory nor on disk')
        data = load_trajectory(e.directory / trajectory_filename(tid, self.trajectory_format), self.trajectory_format)
        if self.trajectory_format == 'pt' and self.max_open_files > 0:
            self._open[tid] = data
            while len(self._open) > self.max_open_files:
                self._open.popitem(last=False)
        return data

    # -- checkpoints -----------------------------------------------------------------------------
    def save_checkpoint(self, save_path: str) -> None:
        """Write the kept trajectories (auto_save: the sampling window) + index + metadata.

        The running buffer is not changed.
        """
        self._check_open()
        self.flush()
        dest = Path(save_path)
        dest.mkdir(parents=True, exist_ok=True)
        with self._lock:
            entries = self._window() if self.auto_save else list(self._entries)
            counter = self._counter
        for e in entries:
            name = trajectory_filename(e.trajectory_id, self.trajectory_format)
            if e.directory is not None:
                src = e.directory / name
                if src.resolve() != (dest / name).resolve():
                    copy_file_durably(src, dest / name)
            else:
                save_trajectory(dest / name, self._memory[e.trajectory_id], self.trajectory_format)
        self._write_index(dest, entries, counter)

    def load_checkpoint(self, load_path: str, is_distributed: bool = False, local_rank: int = 0,
                        world_size: int = 1) -> None:
        """Replace the buffer's contents by a checkpoint (this rank's shard if distributed)."""
        self._check_open()
        src = Path(load_path)
        meta, entries = self._read_index(src)
        if is_distributed:
            if world_size < 1:
                raise ValueError(f'world_size must be >= 1, got {world_size}')
            if not 0 <= local_rank < world_size:
                raise ValueError(f'local_rank {local_rank} is out of range for world_size {world_size}')
            n = len(entries)
            lo, hi = local_rank * n // world_size, (local_rank + 1) * n // world_size
            entries = entries[lo:hi]
        for e in entries:  # fail before changing anything
            f = src / trajectory_filename(e.trajectory_id, self.trajectory_format)
            if not f.is_file():
                raise BufferFileError(f'trajectory file {f} listed in {src / INDEX_FILE} is missing')
        adopt = self.auto_save and src.resolve() != self.auto_save_path.resolve()
        if adopt:  # resuming into another auto-save directory: it must stay loadable on its own
            for e in entries:
                dest = self.auto_save_path / trajectory_filename(e.trajectory_id, self.trajectory_format)
                if dest.exists() and not _same_content(dest, e.directory / dest.name):
                    raise BufferFileError(f'cannot resume {src} into {self.auto_save_path}: it already holds a '
                                          f'different {dest.name}; resume into an empty directory')
        self.flush()
        if adopt:
            for e in entries:
                name = trajectory_filename(e.trajectory_id, self.trajectory_format)
                copy_file_durably(e.directory / name, self.auto_save_path / name)
                e.directory = self.auto_save_path
        with self._lock:
            self._entries = entries
            self._total_samples = sum(e.num_samples for e in entries)
            self._counter = max(self._counter, int(meta['trajectory_counter']))
            self._cache.clear()
            self._open.clear()
            self._memory.clear()
            self._in_arena.clear()
            if not self.auto_save:
                for e in entries:
                    self._memory[e.trajectory_id] = {k: v.clone() for k, v in load_trajectory(
                        src / trajectory_filename(e.trajectory_id, self.trajectory_format), self.trajectory_format,
                        mmap=False).items()}
                    e.directory = None
            counter = self._counter
        if adopt:  # the index lists the adopted files only once they are all on disk
            self._write_index(self.auto_save_path, entries, counter)

    # -- index files -----------------------------------------------------------------------------
    def _write_index(self, directory: Path, entries: Sequence[TrajectoryEntry], counter: int) -> None:
        text = ('{"trajectory_ids":[' + ','.join(str(e.trajectory_id) for e in entries) + '],"trajectories":{' +
                ','.join(f'"{e.trajectory_id}":{e.json_text()}' for e in entries) + '}}')
        atomic_write(directory / INDEX_FILE, lambda f: f.write(text), binary=False)
        atomic_write_json(directory / METADATA_FILE, {
            'version': BUFFER_VERSION, 'trajectory_format': self.trajectory_format, 'seed': self.seed,
            'size': len(entries), 'total_samples': sum(e.num_samples for e in entries),
            'trajectory_counter': counter, 'sample_window_size': self.sample_window_size})

    def _read_index(self, directory: Path) -> tuple[dict, list[TrajectoryEntry]]:
        meta = read_json(directory / METADATA_FILE, 'metadata')
        where = directory / METADATA_FILE
        if not isinstance(meta, dict) or 'trajectory_format' not in meta or 'trajectory_counter' not in meta:
            raise BufferFileError(f'metadata file {where} is corrupt: missing trajectory_format/trajectory_counter')
        if meta['trajectory_format'] != self.trajectory_format:
            raise BufferFileError(f"format mismatch: {where} says {meta['trajectory_format']!r}, this buffer "
                                  f'uses {self.trajectory_format!r}')
        index = read_json(directory / INDEX_FILE, 'index')
        try:
            entries = [TrajectoryEntry.from_json(index['trajectories'][str(i)], directory, directory / INDEX_FILE)
                       for i in index['trajectory_ids']]
        except (KeyError, TypeError) as e:
            raise BufferFileError(f'index file {directory / INDEX_FILE} is corrupt: {e!r}') from None
        return meta, entries

    def _adopt_existing(self, directory: Path) -> None:
        """Re-running into the same directory appends: ids continue, nothing is overwritten."""
        for stale in directory.glob('.*.tmp'):
            stale.unlink(missing_ok=True)  # torn temp files of a crashed writer
        ids_on_disk = [int(p.stem.split('_')[1]) for p in directory.glob(f'trajectory_*.{self.trajectory_format}')
                       if p.stem.split('_')[1].isdigit()]
        if (directory / METADATA_FILE).exists() or (directory / INDEX_FILE).exists():
            meta, entries = self._read_index(directory)
            self._entries = entries
            self._total_samples = sum(e.num_samples for e in entries)
            self._counter = int(meta['trajectory_counter'])
        # files written but never indexed (crash between rename and index) are not reused
        self._counter = max([self._counter] + [i + 1 for i in ids_on_disk])

    # -- lifecycle -------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError('replay buffer is closed')

    def close(self) -> None:
        """Flush pending writes and stop the writer thread; safe to call twice."""
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            if self._writer is not None:
                self._writer.close()
            self._open.clear()
            self._cache.clear()

    def __enter__(self) -> 'TrajectoryReplayBuffer':
        return self

    def __exit__(self, *exc) -> None:
        self.close()
