"""Policy weights in transit: ``torch.save`` bytes with a SHA-256, inline in a message or as a
file on shared storage, always loaded with ``weights_only=True``.

Trust model: ``weights_only`` loading never executes code from the bytes (no pickled objects,
tensors and plain containers only), and the digest is checked before loading, so a truncated
or swapped file is refused. It does not authenticate the sender: anyone who can publish on the
weights topic (the DDS domain; no SROS2 in these wheels) can swap the policy, so the domain is
the trust boundary, as for every other topic of the pipeline.
"""
from __future__ import annotations

import hashlib
import io
from pathlib import Path

import torch

from ..storage.files import atomic_write


def pack(state_dict: dict) -> tuple[bytes, str]:
    buf = io.BytesIO()
    torch.save({k: v.detach().cpu() for k, v in state_dict.items()}, buf)
    data = buf.getvalue()
    return data, hashlib.sha256(data).hexdigest()


def outgoing(state_dict: dict, version: int, inline_max_bytes: int, weights_dir: str) -> tuple[bytes, str, str]:
    """How a learner sends a version: (inline bytes or b'', file path or '', digest): a file
    under ``weights_dir`` when the bytes exceed ``inline_max_bytes`` (and a directory is set)."""
    data, digest = pack(state_dict)
    if len(data) <= inline_max_bytes or not weights_dir:
        return data, '', digest
    return b'', str(write_file(data, weights_dir, version)), digest


def unpack(data: bytes, sha256: str) -> dict:
    got = hashlib.sha256(data).hexdigest()
    if got != sha256:
        raise ValueError(f'weights digest mismatch: got {got[:12]}..., expected {sha256[:12]}...')
    return torch.load(io.BytesIO(data), map_location='cpu', weights_only=True)


def write_file(data: bytes, directory: str | Path, version: int) -> Path:
    """Packed weights as ``<directory>/policy_v<version>.pt``, written atomically and fsynced."""
    path = Path(directory) / f'policy_v{int(version):08d}.pt'
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda fh: fh.write(data))
    return path


def save_file(state_dict: dict, directory: str | Path, version: int) -> tuple[Path, str]:
    """``pack`` + ``write_file``; (path, digest)."""
    data, digest = pack(state_dict)
    return write_file(data, directory, version), digest


def load_file(path: str | Path, sha256: str) -> dict:
    return unpack(Path(path).read_bytes(), sha256)
