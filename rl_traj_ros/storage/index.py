"""The buffer's index (``trajectory_index.json`` + ``metadata.json``), kept apart from the data.

Each stored trajectory has a sequence number in its buffer (``seq``; the spec's index calls it
``trajectory_id`` on disk) that names its file; its identity (``TrajectoryId``, what it *is*)
is a separate record. The index lists complete files only and is replaced atomically, so a
reader sees some complete version of it at any moment.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

from ..data.identity import TrajectoryId
from ..data.schema import TrajectoryKey
from ..data.trajectory import Trajectory
from .files import BufferFileError, atomic_write, atomic_write_json, load_trajectory, read_json, trajectory_filename
from .layout import trajectory_from_stored

INDEX_FILE = 'trajectory_index.json'
METADATA_FILE = 'metadata.json'
BUFFER_VERSION = 1


class TrajectoryEntry:
    """What the index knows of one trajectory without opening its file.

    The entry's index record is serialized once, when it is created or read, and kept as
    JSON text: the index file is rewritten after every write by joining these texts (no
    re-serialization of every entry), and the in-memory index costs a few hundred bytes per
    trajectory instead of Python lists of its keys and rows. ``keys``/``identity`` parse it.
    """

    __slots__ = ('uuid', 'seq', 'num_samples', 'shape', 'max_episode_length', 'directory', '_text')

    def __init__(self, uuid: str, seq: int, num_samples: int, shape: list[int], max_episode_length: int,
                 directory: Optional[Path] = None, keys: Optional[list[list[int]]] = None,
                 identity: Optional[dict] = None):
        self.uuid, self.seq, self.num_samples = uuid, seq, num_samples
        self.shape, self.max_episode_length = shape, max_episode_length   # [T, B]; longest run between dones
        self.directory = directory  # where its file lives; None: memory only
        d = {'uuid': uuid, 'trajectory_id': seq, 'num_samples': num_samples, 'shape': shape,
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


def write_index(directory: Path, entries: Sequence[TrajectoryEntry], counter: int, trajectory_format: str,
                seed: int, sample_window_size: int) -> None:
    """Replace the index and metadata of ``directory`` atomically (index first: metadata's
    totals then describe an index that is already on disk)."""
    text = ('{"trajectory_ids":[' + ','.join(str(e.seq) for e in entries) + '],"trajectories":{' +
            ','.join(f'"{e.seq}":{e.json_text()}' for e in entries) + '}}')
    atomic_write(directory / INDEX_FILE, lambda f: f.write(text), binary=False)
    atomic_write_json(directory / METADATA_FILE, {
        'version': BUFFER_VERSION, 'trajectory_format': trajectory_format, 'seed': seed,
        'size': len(entries), 'total_samples': sum(e.num_samples for e in entries),
        'trajectory_counter': counter, 'sample_window_size': sample_window_size})


def read_index(directory: Path, trajectory_format: str) -> tuple[dict, list[TrajectoryEntry]]:
    """Metadata and entries of ``directory``; a corrupt file or another format is named."""
    meta = read_json(directory / METADATA_FILE, 'metadata')
    where = directory / METADATA_FILE
    if not isinstance(meta, dict) or 'trajectory_format' not in meta or 'trajectory_counter' not in meta:
        raise BufferFileError(f'metadata file {where} is corrupt: missing trajectory_format/trajectory_counter')
    if meta['trajectory_format'] != trajectory_format:
        raise BufferFileError(f"format mismatch: {where} says {meta['trajectory_format']!r}, this buffer "
                              f'uses {trajectory_format!r}')
    index = read_json(directory / INDEX_FILE, 'index')
    try:
        entries = [TrajectoryEntry.from_json(index['trajectories'][str(i)], directory, directory / INDEX_FILE)
                   for i in index['trajectory_ids']]
    except (KeyError, TypeError) as e:
        raise BufferFileError(f'index file {directory / INDEX_FILE} is corrupt: {e!r}') from None
    return meta, entries


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
    for seq in index.get('trajectory_ids', []):
        rec = index["trajectories"][str(seq)]
        if 'identity' not in rec:
            continue
        ident = TrajectoryId.from_json(rec['identity'])
        if not want(ident):
            continue
        flat = load_trajectory(directory / trajectory_filename(int(seq), meta['trajectory_format']),
                               meta['trajectory_format'], mmap=False)
        out.append(trajectory_from_stored(flat, rec['shape'], [TrajectoryKey.from_tuple(k) for k in rec['keys']],
                                          ident))
    return out

def same_content(a: Path, b: Path) -> bool:
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


__all__ = ['INDEX_FILE', 'METADATA_FILE', 'BUFFER_VERSION', 'TrajectoryEntry', 'write_index', 'read_index', 'read_stored_trajectories', 'same_content']
