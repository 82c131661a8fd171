"""TrajectoryReplayBuffer: whole [T, B, ...] trajectories on disk, sampled per row (spec §6).

Composed like torchrl's buffers: a ``storage`` (``backends.Storage``: ``files.TrajectoryFiles``,
one durable file per trajectory with an LRU of open memory maps, or ``backends.MemoryStorage``),
an index (``index.py``: ``trajectory_index.json`` + ``metadata.json``), a FIFO cache of the newest
flattened trajectories (``cache.py``), one writer thread with a bounded queue (``background.py``)
and a ``sampler`` (``sampler.py``, uniform over the window by default) whose rows the buffer
gathers (``get``). Trajectories stay whole (many episodes each), time-major (``layout.py``).

Delivery guarantee: ``add_trajectories`` returns once a trajectory is queued; it is
*acknowledged* (durable) once ``flush()`` returned or ``on_durable`` was called for it.
Files and index are written atomically and the index only lists complete files, so after a
crash at any moment the directory loads and holds every acknowledged trajectory.
"""
from __future__ import annotations

import threading
import uuid as uuidlib
from pathlib import Path
from typing import Callable, Iterable, Optional

import torch

from ..params.defaults import WRITER
from ..data.identity import TrajectoryId
from ..data.schema import TrajectoryKey
from ..data.trajectory import Trajectory
from .backends import MemoryStorage, Storage
from .background import BackgroundWriter, QueueFull
from .cache import TrajectoryCache
from .files import (FORMATS, BufferFileError, TrajectoryFiles, copy_file_durably, load_trajectory, plain_copy,
                    save_trajectory, trajectory_filename)
from .index import INDEX_FILE, METADATA_FILE, TrajectoryEntry, read_index, same_content, write_index
from .layout import TrajectoryLike, flatten_trajectory
from .sampler import Sampler, UniformSampler


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
    ``max_open_files``: memory-mapped trajectory files kept open between ``sample`` calls (by
    the ``TrajectoryFiles`` the buffer makes).
    ``on_durable(seq)`` runs on the writer thread once a trajectory's file and index are on disk
    (what a node acknowledges). ``sampler``: which rows ``sample`` takes (``UniformSampler``
    over the window by default). ``storage``: where the data go (``TrajectoryFiles`` of
    ``auto_save_path`` with ``auto_save``, else a ``MemoryStorage``; a durable one passed in
    implies ``auto_save``). Each trajectory gets a
    sequence number ``seq`` in this buffer (its file name); what it *is* is its identity.
    """

    def __init__(self, seed: int = WRITER.seed, enable_cache: bool = True, cache_size: int = WRITER.cache_size,
                 sample_window_size: int = WRITER.sample_window_size, auto_save: bool = False,
                 auto_save_path: Optional[str] = None, trajectory_format: str = WRITER.trajectory_format,
                 max_pending_writes: int = WRITER.max_pending_writes, max_open_files: int = 256,
                 on_durable: Optional[Callable[[int], None]] = None, sampler: Optional[Sampler] = None,
                 storage: Optional[Storage] = None):
        if storage is not None:
            auto_save = storage.durable
            if auto_save:
                auto_save_path, trajectory_format = str(storage.directory), storage.format
        if trajectory_format not in FORMATS:
            raise ValueError(f'trajectory_format must be one of {FORMATS}, got {trajectory_format!r}')
        if sample_window_size < 0 or cache_size < 0:
            raise ValueError('sample_window_size and cache_size must be >= 0')
        if auto_save and not auto_save_path:
            raise ValueError('auto_save=True needs auto_save_path')
        self.seed, self.enable_cache, self.cache_size, self.sample_window_size = seed, enable_cache, cache_size, \
            sample_window_size
        self.auto_save, self.auto_save_path = auto_save, Path(auto_save_path) if auto_save_path else None
        self.trajectory_format, self.on_durable = trajectory_format, on_durable
        self.sampler: Sampler = sampler if sampler is not None else UniformSampler(seed)
        self._lock = threading.RLock()
        self._entries: list[TrajectoryEntry] = []          # insertion order
        self._pending: dict[int, dict] = {}                  # queued for the writer, not yet durable
        self._in_arena: set[int] = set()                     # seqs whose pending/stored data are cache views
        self._cache = TrajectoryCache(cache_size if enable_cache else 0)
        self._counter, self._total_samples, self._closed = 0, 0, False
        self._writer: Optional[BackgroundWriter] = None
        self.storage: Storage = storage if storage is not None else (
            TrajectoryFiles(self.auto_save_path, trajectory_format, max_open_files) if auto_save else MemoryStorage())
        if auto_save:
            self._adopt_existing()
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
    def seqs(self) -> list[int]:
        """Sequence numbers of the kept trajectories, in insertion order."""
        return [e.seq for e in self._entries]

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
                seq = self._counter
                self._counter += 1
                keys = [list(k.as_tuple()) for k in traj.keys] if isinstance(traj, Trajectory) and traj.keys else None
                ident = getattr(traj, 'identity', None)
                entry = TrajectoryEntry(str(uuidlib.uuid4()), seq, shape[0] * shape[1], shape, max_len,
                                        self.auto_save_path if self.auto_save else None, keys,
                                        ident.to_json() if ident is not None else None)
                self._entries.append(entry)
                self.sampler.added(entry)
                self._total_samples += entry.num_samples
                # ONE copy of the caller's tensors: into the cache arena, whose views the writer
                # queue / in-memory store then share (detached on eviction), or else a clone
                views = self._cache.put(seq, flat, self._detach)
                if views is not None:
                    flat = views
                    self._in_arena.add(seq)
                else:
                    flat = {k: v.clone() for k, v in flat.items()}
                if self.auto_save:
                    self._pending[seq] = flat
                else:
                    self.storage.put(seq, flat)
                    self._trim_memory()
            if self._writer is not None:
                self._writer.submit(seq)
            ids.append(seq)
        return ids

    def _trim_memory(self) -> None:
        """Without auto_save only the sampling window can ever be sampled: keep just that."""
        if self.sample_window_size and len(self._entries) > self.sample_window_size:
            for e in self._entries[:-self.sample_window_size]:
                self.storage.drop(e.seq)
                self._in_arena.discard(e.seq)
                self._total_samples -= e.num_samples
            self._entries = self._entries[-self.sample_window_size:]

    def _detach(self, seq: int, views: dict) -> None:
        """The cache is about to reuse ``seq``'s slot: data still owned elsewhere gets a copy."""
        if seq in self._in_arena:
            self._in_arena.discard(seq)
            copy = {k: v.clone() for k, v in views.items()}
            if seq in self._pending:
                self._pending[seq] = copy
            elif not self.auto_save:
                self.storage.put(seq, copy)

    def _write_one(self, seq: int) -> None:
        """File, then index. Re-run as a whole when a disk error is retried: a file already
        written (the index write failed) is not written again."""
        with self._lock:  # a private copy: the slot may be reused while the file is written
            flat = self._pending.get(seq)
            if flat is not None and seq in self._in_arena:
                self._in_arena.discard(seq)
                flat = self._pending[seq] = {k: plain_copy(v) for k, v in flat.items()}
        if flat is not None:
            self.storage.put(seq, flat)
        with self._lock:
            self._pending.pop(seq, None)
            durable = [e for e in self._entries if e.seq not in self._pending]
            counter = self._counter
        # index + metadata only after the file is complete; they list durable files only
        self._write_index(self.auto_save_path, durable, counter)
        if self.on_durable is not None:
            self.on_durable(seq)

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

    def sample(self, num_chunks: int, with_index: bool = False) -> dict[str, torch.Tensor]:
        """``num_chunks`` rows the sampler draws from the window: {field: [n, ...]}; with
        ``with_index`` also each row's ``index/seq``, ``index/row`` and importance ``index/weight``
        (what a prioritized sampler's ``update_priority`` takes back)."""
        self._check_open()
        if self._writer is not None and self._writer.error is not None:
            self.flush()
        with self._lock:  # one window for the sampler's draw and the gather
            window = self._window()
            draw = self.sampler.sample(window, num_chunks)
            out = self._gather(window, draw.which, draw.rows)
        if with_index:
            out.update({'index/seq': draw.seqs, 'index/row': draw.rows, 'index/weight': draw.weights})
        return out

    def get(self, which: torch.Tensor, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """The rows ``rows`` of the window's trajectories at positions ``which`` (a sampler's draw)."""
        self._check_open()
        with self._lock:
            return self._gather(self._window(), which, rows)

    def all_samples(self, fields: Optional[Iterable[str]] = None) -> dict[str, torch.Tensor]:
        """Every row of the window, in insertion order ({field: [total, ...]}; ``fields``: only
        these): statistics over a whole (small) buffer, e.g. the demonstrations' state scale."""
        self._check_open()
        with self._lock:
            window = self._window()
            which = torch.cat([torch.full((e.num_samples,), p) for p, e in enumerate(window)])
            rows = torch.cat([torch.arange(e.num_samples) for e in window])
            return self._gather(window, which, rows, None if fields is None else set(fields))

    def _gather(self, window: list[TrajectoryEntry], which: torch.Tensor, rows: torch.Tensor,
                fields: Optional[set[str]] = None) -> dict:
        num_chunks = int(which.shape[0])
        # cached rows: one gather per field from the cache arena
        starts = torch.tensor([-1 if (a := self._cache.arena_rows(e.seq)) is None else a
                               for e in window])
        base = starts[which]
        hit = base >= 0
        out: dict[str, torch.Tensor] = {}
        wanted = (lambda k: k in fields) if fields is not None else (lambda k: True)  # noqa: E731
        if bool(hit.all()):
            return {k: v.index_select(0, base + rows) for k, v in self._cache.arena.items() if wanted(k)}
        if bool(hit.any()):
            pos, src = hit.nonzero().squeeze(1), (base + rows)[hit]
            for k, v in self._cache.arena.items():
                if not wanted(k):
                    continue
                out[k] = torch.empty((num_chunks, *v.shape[1:]), dtype=v.dtype)
                out[k].index_copy_(0, pos, v.index_select(0, src))
        # the others: each needed trajectory read (memory-mapped) at most once
        miss = ~hit
        for p in torch.unique(which[miss]).tolist():
            mask = (miss & (which == p)).nonzero().squeeze(1)
            data = self._fetch(window[p])
            r = rows[mask]
            for k, v in data.items():
                if not wanted(k):
                    continue
                if k not in out:
                    out[k] = torch.empty((num_chunks, *v.shape[1:]), dtype=v.dtype)
                out[k].index_copy_(0, mask, v.index_select(0, r))
        return out

    def _fetch(self, e: TrajectoryEntry) -> dict:
        for source in (self._cache.get(e.seq), self._pending.get(e.seq)):
            if source is not None:
                return source
        return self.storage.get(e.seq)

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
            name = trajectory_filename(e.seq, self.trajectory_format)
            if e.directory is not None:
                src = e.directory / name
                if src.resolve() != (dest / name).resolve():
                    copy_file_durably(src, dest / name)
            else:
                save_trajectory(dest / name, self.storage.get(e.seq), self.trajectory_format)
        self._write_index(dest, entries, counter)

    def load_checkpoint(self, load_path: str, is_distributed: bool = False, local_rank: int = 0,
                        world_size: int = 1) -> None:
        """Replace the buffer's contents by a checkpoint (this rank's shard if distributed)."""
        self._check_open()
        src = Path(load_path)
        meta, entries = read_index(src, self.trajectory_format)
        if is_distributed:
            if world_size < 1:
                raise ValueError(f'world_size must be >= 1, got {world_size}')
            if not 0 <= local_rank < world_size:
                raise ValueError(f'local_rank {local_rank} is out of range for world_size {world_size}')
            n = len(entries)
            lo, hi = local_rank * n // world_size, (local_rank + 1) * n // world_size
            entries = entries[lo:hi]
        for e in entries:  # fail before changing anything
            f = src / trajectory_filename(e.seq, self.trajectory_format)
            if not f.is_file():
                raise BufferFileError(f'trajectory file {f} listed in {src / INDEX_FILE} is missing')
        adopt = self.auto_save and src.resolve() != self.auto_save_path.resolve()
        if adopt:  # resuming into another auto-save directory: it must stay loadable on its own
            for e in entries:
                dest = self.auto_save_path / trajectory_filename(e.seq, self.trajectory_format)
                if dest.exists() and not same_content(dest, e.directory / dest.name):
                    raise BufferFileError(f'cannot resume {src} into {self.auto_save_path}: it already holds a '
                                          f'different {dest.name}; resume into an empty directory')
        self.flush()
        if adopt:
            for e in entries:
                name = trajectory_filename(e.seq, self.trajectory_format)
                copy_file_durably(e.directory / name, self.auto_save_path / name)
                e.directory = self.auto_save_path
        with self._lock:
            self._entries = entries
            self._total_samples = sum(e.num_samples for e in entries)
            self._counter = max(self._counter, int(meta['trajectory_counter']))
            self._cache.clear()
            self.storage.clear()
            self._in_arena.clear()
            if not self.auto_save:
                for e in entries:
                    self.storage.put(e.seq, {k: v.clone() for k, v in load_trajectory(
                        src / trajectory_filename(e.seq, self.trajectory_format), self.trajectory_format,
                        mmap=False).items()})
                    e.directory = None
            counter = self._counter
        if adopt:  # the index lists the adopted files only once they are all on disk
            self._write_index(self.auto_save_path, entries, counter)

    # -- index files -----------------------------------------------------------------------------
    def _write_index(self, directory: Path, entries: list[TrajectoryEntry], counter: int) -> None:
        write_index(directory, entries, counter, self.trajectory_format, self.seed, self.sample_window_size)

    def _adopt_existing(self) -> None:
        """Re-running into the same directory appends: seqs continue, nothing is overwritten."""
        directory = self.storage.directory
        self.storage.remove_temporaries()
        ids_on_disk = self.storage.seqs_on_disk()
        if (directory / METADATA_FILE).exists() or (directory / INDEX_FILE).exists():
            meta, self._entries = read_index(directory, self.trajectory_format)
            self._counter = int(meta['trajectory_counter'])
            self._total_samples = sum(e.num_samples for e in self._entries)
        # files written but never indexed (crash between rename and index) are not reused
        self._counter = max([self._counter] + [i + 1 for i in ids_on_disk])
        if not (directory / METADATA_FILE).exists():  # a run stopped before its first trajectory
            self._write_index(directory, [], self._counter)  # still leaves a buffer that loads (empty)

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
            self.storage.clear()
            self._cache.clear()

    def __enter__(self) -> 'TrajectoryReplayBuffer':
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ['TrajectoryReplayBuffer', 'BufferFull']
