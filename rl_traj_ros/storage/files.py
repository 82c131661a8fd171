"""Atomic files and the two trajectory file formats of the replay buffer.

Every file is written to a temporary name in the same directory, fsynced, renamed, and the
directory fsynced after the rename, so a crash at any moment (process kill or power loss)
leaves either the old file or the complete new one, never a torn one, and a file whose write
returned survives a power loss (the rename itself is on disk, not only in the page cache).

Trust model: ``pt`` files are loaded with ``torch.load(weights_only=True)``, which
refuses arbitrary objects, so a ``pt`` buffer from an untrusted source cannot run code.
``pkl`` files are unpickled, which CAN run arbitrary code: load ``pkl`` buffers only from
sources you trust (your own collection runs).
"""
from __future__ import annotations

import json
import os
import pickle
import shutil
import tempfile
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

FORMATS = ('pt', 'pkl')


class BufferFileError(RuntimeError):
    """A buffer file is missing, corrupt or of the wrong format; the message names it."""


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _umask()  # read once, at import (os.umask can only be read by setting it)


def stage_write(path: Path, write: Callable[[Any], None], binary: bool = True) -> Path:
    """Write and fsync a hidden temp file beside ``path``; the caller renames it into place.

    Several staged files can then be published with back-to-back renames, so readers see
    the old set or the new set, with no slow I/O in between."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f'.{path.name}.', suffix='.tmp', dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp's 0600 would hide this file from the other users of a share
        with os.fdopen(fd, 'wb' if binary else 'w') as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return Path(tmp)


def fsync_dir(directory: Path) -> None:
    """Make renames and new names in ``directory`` durable (POSIX: fsync the directory)."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, 'O_DIRECTORY', 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish_staged(staged: list[tuple[Path, Path]]) -> None:
    """Rename staged temp files into place back to back, then fsync their directories once."""
    for tmp, path in staged:
        os.replace(tmp, path)
    for d in {Path(path).parent for _, path in staged}:
        fsync_dir(d)


def atomic_write(path: Path, write: Callable[[Any], None], binary: bool = True) -> None:
    path = Path(path)
    publish_staged([(stage_write(path, write, binary), path)])


def copy_file_durably(src: Path, dest: Path) -> None:
    """Copy ``src`` to ``dest`` atomically and durably (temp file, fsync, rename, dir fsync)."""
    def write(f) -> None:
        with open(src, 'rb') as s:
            shutil.copyfileobj(s, f, 1 << 20)
    atomic_write(dest, write)


def json_writer(obj: Any, sort_keys: bool = True, indent: int = 1) -> Callable[[Any], None]:
    return lambda f: json.dump(obj, f, indent=indent, sort_keys=sort_keys)


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write(path, json_writer(obj), binary=False)


def read_json(path: Path, what: str) -> Any:
    path = Path(path)
    if not path.is_file():
        raise BufferFileError(f'{what} file {path} is missing')
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BufferFileError(f'{what} file {path} is corrupt: {e}') from None


def trajectory_filename(seq: int, fmt: str) -> str:
    return f"trajectory_{seq:08d}.{fmt}"


def plain_copy(v: torch.Tensor) -> torch.Tensor:
    """A contiguous copy that never uses torch's intra-op thread pool.

    For the writer threads: with ``Tensor.clone`` there, ``sample`` on the training thread
    ran at half speed afterwards on this 2-core machine (bench/bench_writer_thread_copy.py:
    4.4k vs 9.3k samples/s from disk), most likely because parallel ops from two threads make
    two OpenMP teams contend for the cores. numpy's copy is a plain single-threaded memcpy."""
    try:
        if v.dtype == torch.bfloat16:
            return torch.from_numpy(v.view(torch.int16).numpy().copy()).view(torch.bfloat16)
        return torch.from_numpy(v.numpy().copy())
    except (TypeError, RuntimeError):  # dtypes numpy lacks (float8, ...)
        return v.clone()


def _own_storage(v: torch.Tensor) -> torch.Tensor:
    """torch.save writes a view's WHOLE storage (a cache arena slice would drag the arena along)."""
    exact = v.storage_offset() == 0 and v.is_contiguous() and \
        v.untyped_storage().nbytes() == v.numel() * v.element_size()
    return v if exact else plain_copy(v)


def save_trajectory(path: Path, data: dict[str, torch.Tensor], fmt: str) -> None:
    if fmt == 'pt':
        data = {k: _own_storage(v) for k, v in data.items()}
        atomic_write(path, lambda f: torch.save(data, f))
    elif fmt == 'pkl':
        arrays = {k: (v.view(torch.int16).numpy(), 'bfloat16') if v.dtype == torch.bfloat16 else (v.numpy(), None)
                  for k, v in data.items()}
        atomic_write(path, lambda f: pickle.dump(arrays, f, protocol=5))
    else:
        raise ValueError(f'trajectory_format must be one of {FORMATS}, got {fmt!r}')


def load_trajectory(path: Path, fmt: str, mmap: bool = True) -> dict[str, torch.Tensor]:
    """``pt`` is memory-mapped: sampling reads only the pages of the rows it takes."""
    path = Path(path)
    if not path.is_file():
        raise BufferFileError(f'trajectory file {path} is missing')
    try:
        if fmt == 'pt':
            data = torch.load(path, mmap=mmap, weights_only=True, map_location='cpu')
        else:
            with open(path, 'rb') as f:
                arrays = pickle.load(f)  # trusted data only (see module docstring)
            data = {k: torch.from_numpy(np.asarray(a)).view(torch.bfloat16) if tag == 'bfloat16'
                    else torch.from_numpy(np.asarray(a)) for k, (a, tag) in arrays.items()}
    except Exception as e:  # noqa: BLE001 - any decoding failure is a corrupt file
        raise BufferFileError(f'trajectory file {path} is corrupt or not a {fmt} trajectory: {e}') from None
    if not isinstance(data, dict) or not all(isinstance(v, torch.Tensor) for v in data.values()):
        raise BufferFileError(f'trajectory file {path} does not hold a dict of tensors')
    return data


class TrajectoryFiles:
    """Durable storage of a replay buffer (``storage.backends.Storage``): one file per
    trajectory, named by its ``seq``; the newest ``max_open_files`` memory-mapped ``pt`` files
    stay open between reads (an LRU), so sampling reads only the pages of the rows it takes.

    What a buffer's ``storage=`` argument takes; a subclass can add what a deployment needs
    (another file system layout, or a test's slow disk) without touching the buffer."""

    durable = True

    def __init__(self, directory: str | Path, fmt: str = 'pt', max_open_files: int = 256):
        if fmt not in FORMATS:
            raise ValueError(f'trajectory_format must be one of {FORMATS}, got {fmt!r}')
        if max_open_files < 0:
            raise ValueError(f'max_open_files must be >= 0, got {max_open_files}')
        self.directory, self.format, self.max_open_files = Path(directory), fmt, max_open_files
        self.directory.mkdir(parents=True, exist_ok=True)
        self._open: OrderedDict[int, dict[str, torch.Tensor]] = OrderedDict()  # seq -> mapped file (LRU)

    def path(self, seq: int) -> Path:
        return self.directory / trajectory_filename(seq, self.format)

    def put(self, seq: int, data: dict[str, torch.Tensor]) -> None:
        """Write ``seq``'s file atomically and durably (returns once it is on disk)."""
        save_trajectory(self.path(seq), data, self.format)

    def get(self, seq: int) -> dict[str, torch.Tensor]:
        """``seq``'s tensors, memory-mapped (``pt``) through the LRU of open files."""
        data = self._open.get(seq)
        if data is not None:
            self._open.move_to_end(seq)
            return data
        data = load_trajectory(self.path(seq), self.format)
        if self.format == 'pt' and self.max_open_files > 0:
            self._open[seq] = data
            while len(self._open) > self.max_open_files:
                self._open.popitem(last=False)
        return data

    def drop(self, seq: int) -> None:
        """The buffer no longer samples ``seq``: close its map (the file stays)."""
        self._open.pop(seq, None)

    def clear(self) -> None:
        """Close every map (the files stay)."""
        self._open.clear()

    @property
    def open_files(self) -> int:
        return len(self._open)

    def seqs_on_disk(self) -> list[int]:
        """Sequence numbers of the trajectory files present (indexed or not)."""
        stems = (p.stem.split('_')[1] for p in self.directory.glob(f'trajectory_*.{self.format}'))
        return [int(s) for s in stems if s.isdigit()]

    def remove_temporaries(self) -> None:
        """Torn temp files of a crashed writer."""
        for stale in self.directory.glob('.*.tmp'):
            stale.unlink(missing_ok=True)
