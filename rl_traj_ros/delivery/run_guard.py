"""Which messages a node takes: its own run's, and for commands that move the robot, signed ones.

Two pipelines in one ROS domain (the default ``ROS_DOMAIN_ID=0``, two people on one LAN) share
every topic name, and Fast DDS here has no security plugins. So each run has an id that every
data-path message carries (``run_id``): a node drops another run's messages, counts them
(``foreign``) and warns once per other run and topic, never fails on them. The messages that move
the robot or change what moves it (ActionChunk, Intervention, PolicyWeights) also carry an
HMAC-SHA256 under a per-run secret (``auth``): with ``require_signed`` (the default of a real
robot) an unsigned one is refused (``unsigned``), and with a secret any wrong signature is
(``forged``). The trust model is docs/fault_tolerance.md's "Trust model".

ROS-free: the node layer gives the message's run id, signature and signed bytes (``ros.run_link``).
"""
from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
import tempfile
from pathlib import Path
from typing import Callable, Iterable, Optional

SECRET_BYTES = 32  # the key of HMAC-SHA256: as long as its output


def read_secret(path: str) -> bytes:
    """The run's secret from ``path`` (hex), refused when others than its owner may read it."""
    try:
        st = os.stat(path)
        text = Path(path).read_text().strip()
    except OSError as e:
        raise ValueError(f'secret_file {path!r}: cannot read it ({e.strerror})') from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ValueError(f'secret_file {path!r} is readable by others (mode {stat.S_IMODE(st.st_mode):o}): '
                         f'chmod 600 it, or make a new one')
    try:
        key = bytes.fromhex(text)
    except ValueError:
        raise ValueError(f'secret_file {path!r} does not hold a hex secret') from None
    if len(key) < 16:
        raise ValueError(f'secret_file {path!r} holds {len(key)} bytes: at least 16 are needed')
    return key


def new_secret_file(run_id: str, folder: Optional[str] = None) -> str:
    """A fresh secret for ``run_id``, written owner-only (0600, in a 0700 folder): in ``folder``,
    else the user's runtime directory ($XDG_RUNTIME_DIR, else the temp folder)."""
    if folder is None:
        base = os.environ.get('XDG_RUNTIME_DIR') or tempfile.gettempdir()
        folder = os.path.join(base, f'rl_traj_ros-{os.getuid()}')
    os.makedirs(folder, mode=0o700, exist_ok=True)
    os.chmod(folder, 0o700)
    path = os.path.join(folder, f'{run_id or "run"}.key')
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, 'w') as f:
        f.write(secrets.token_hex(SECRET_BYTES) + '\n')
    os.chmod(path, 0o600)
    return path


class RunGuard:
    """Admit a message: its run id is this run's; a command's signature checks out.

    ``warn(line)`` is called once per (other run, topic) and once per (topic, refusal), so a
    neighbour's run logs a line, not a line per message."""

    def __init__(self, run_id: str, secret: Optional[bytes], require_signed: bool, warn: Callable[[str], None]):
        if require_signed and secret is None:
            raise ValueError('require_signed is set (the default with env_type franky) but secret_file is not: no '
                             "command could be checked. Give every node of the run the run's secret_file (make one: "
                             '(umask 077; openssl rand -hex 32 > run.key)), or set require_signed:=false')
        self.run_id, self.secret, self.require_signed, self.warn = run_id, secret, require_signed, warn
        self.counters = {'foreign': 0, 'unsigned': 0, 'forged': 0}
        self._warned: set = set()

    def sign(self, payload: Iterable[bytes]) -> bytes:
        """The signature of the concatenated ``payload`` (empty without a secret: the run is unsigned)."""
        if self.secret is None:
            return b''
        mac = hmac.new(self.secret, digestmod=hashlib.sha256)
        for part in payload:
            mac.update(part)
        return mac.digest()

    def admit(self, topic: str, run_id: str, auth: bytes = b'',
              payload: Optional[Callable[[], Iterable[bytes]]] = None) -> bool:
        """Whether to take the message; ``payload`` (a command's signed bytes) only for commands."""
        if run_id != self.run_id:
            return self._refuse('foreign', (topic, run_id), f"{topic}: dropping messages of another run "
                                f"{run_id or '(none)'!r} (this run is {self.run_id or '(none)'!r}; counted as foreign)")
        if payload is None:
            return True
        if not auth:
            if not self.require_signed:
                return True
            return self._refuse('unsigned', (topic, 'unsigned'), f'{topic}: refusing unsigned commands '
                                '(require_signed: every command must carry the HMAC of this run\'s secret_file)')
        if self.secret is None:  # signed by a run whose secret this node was not given: not checkable
            return True
        if hmac.compare_digest(auth, self.sign(payload())):
            return True
        return self._refuse('forged', (topic, 'forged'), f'{topic}: refusing a command whose signature is not '
                            "this run's (a wrong or forged HMAC)")

    def _refuse(self, counter: str, key, line: str) -> bool:
        self.counters[counter] += 1
        if key not in self._warned:
            self._warned.add(key)
            self.warn(line)
        return False
