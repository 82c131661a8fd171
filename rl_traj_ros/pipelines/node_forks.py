"""Start this package's nodes by forking a process that has already imported them.

Every node process imports torch, rclpy and this package before it does anything (about 2 s of
CPU), and a run starts five or more nodes at once on a workstation that is busy with the
simulator and the learner. A fork server ("zygote", like multiprocessing's forkserver) imports
the nodes' modules once; each node is then a fork of it, with those modules already in memory
(and shared copy-on-write). The node runs as ``python -m rl_traj_ros.nodes.NAME`` would: its module
executed as ``__main__`` by runpy and the interpreter's own exit path (exit code, traceback,
atexit, non-daemon threads), in its own session, with the server's environment (one server per
environment), the request's working directory and its output on a pipe the runner reads.

Fork safety: the server only imports (no ``rclpy.init``, no DDS participant, no threads of its
own; the imports start OpenBLAS's pool and lttng-ust's listener threads, both fork-aware or not
needed in a node) and is single-threaded when it forks. It reaps its children and reports each
exit code, so the runner keeps ``Popen``'s ``poll``/``wait``/``returncode``. No node outlives its
run: the server dies with the thread that started it (``PR_SET_PDEATHSIG``, SIGKILL) and each
node then gets SIGINT, its orderly end (its own ``PR_SET_PDEATHSIG`` relative to the server).
The server does not hold a run's nodes hostage either: when the runner closes the connection
(or exits) it waits for its children and exits.
"""
from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Optional

NODE_PACKAGE = 'rl_traj_ros.nodes.'
PRELOAD = ('franka_env_node', 'policy_node', 'trajectory_collector_node', 'replay_buffer_writer_node',
           'learner_node', 'spacemouse_teleop_node', 'gello_teleop_node')
PR_SET_PDEATHSIG, PR_SET_NAME = 1, 15
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith('linux') else None


def die_with_parent(parent: int, sig: int = signal.SIGINT) -> None:
    """In a child (before exec, or a forked node): ``sig`` (SIGINT, a node's orderly end) when
    the thread that started it dies."""
    if _LIBC is not None:
        _LIBC.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the request took effect
            os._exit(1)


def node_module(cmd: list[str]) -> Optional[str]:
    """The node module of ``[sys.executable, '-m', 'rl_traj_ros.nodes.X', ...]``, else None (a
    command under a prefix, another script or executable: that one is exec'd as given)."""
    if len(cmd) >= 3 and cmd[0] == sys.executable and cmd[1] == '-m' and cmd[2].startswith(NODE_PACKAGE):
        return cmd[2]
    return None


class ForkedNode:
    """A node forked by the server: the part of ``subprocess.Popen`` a runner uses."""

    def __init__(self, args: list[str], pid: int, stdout):
        self.args, self.pid, self.stdout = args, pid, stdout
        self.returncode: Optional[int] = None
        self._exited = threading.Event()

    def _set_exit(self, code: int) -> None:
        self.returncode = code
        self._exited.set()

    def poll(self) -> Optional[int]:
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        if not self._exited.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:  # exited, its code not read yet
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class NodeForker:
    """The runner's end: one fork server, started with ``env``; ``spawn`` forks a node from it."""

    def __init__(self, env: dict):
        from functools import partial
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = ours
        self.proc = subprocess.Popen(
            [sys.executable, '-m', __name__, str(theirs.fileno())], pass_fds=(theirs.fileno(),), env=dict(env),
            stdin=subprocess.DEVNULL, start_new_session=True,
            preexec_fn=partial(die_with_parent, os.getpid(), signal.SIGKILL))
        theirs.close()
        self.lock = threading.Lock()
        self.pending: dict[int, Future] = {}
        self.nodes: dict[int, ForkedNode] = {}   # running, by pid
        self.early: dict[int, int] = {}          # pid -> exit code that came before spawn() recorded the node
        self.next_id = 0
        self.alive = True
        threading.Thread(target=self._read, daemon=True, name='node-forker').start()

    def spawn(self, cmd: list[str], cwd: Optional[str] = None) -> ForkedNode:
        r, w = os.pipe()
        with self.lock:
            if not self.alive:
                os.close(r), os.close(w)
                raise RuntimeError('the node fork server exited')
            self.next_id += 1
            ident, fut = self.next_id, Future()
            self.pending[ident] = fut
            request = {'id': ident, 'module': cmd[2], 'argv': cmd[3:], 'cwd': cwd or os.getcwd()}
            try:
                socket.send_fds(self.sock, [json.dumps(request).encode()], [w])
            finally:
                os.close(w)
        try:
            pid = fut.result(timeout=60)
        except BaseException:
            os.close(r)
            raise
        node = ForkedNode(cmd, pid, open(r, errors='replace'))
        with self.lock:
            code = self.early.pop(pid, None)
            if code is None:
                self.nodes[pid] = node
        if code is not None:
            node._set_exit(code)
        return node

    def _read(self) -> None:
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except OSError:
                data = b''
            if not data:
                break
            msg = json.loads(data)
            with self.lock:
                if 'id' in msg:
                    self.pending.pop(msg['id']).set_result(msg['pid'])
                    continue
                node = self.nodes.pop(msg['pid'], None)
                if node is None:  # spawn() has not recorded it yet
                    self.early[msg['pid']] = msg['code']
                    continue
            node._set_exit(msg['code'])
        with self.lock:
            self.alive = False
            for fut in self.pending.values():
                fut.set_exception(RuntimeError('the node fork server exited'))
            self.pending.clear()
            running, self.nodes = list(self.nodes.values()), {}
        for node in running:  # their server is gone, so are they (SIGINT on its death); their codes are lost
            node._set_exit(-signal.SIGKILL)


_FORKERS: dict[tuple, NodeForker] = {}
_FORKERS_LOCK = threading.Lock()
# the server's PR_SET_PDEATHSIG follows the thread that forked it: one that lives as long as this process
_STARTER = ThreadPoolExecutor(1, thread_name_prefix='node-forker-start')


def spawn(cmd: list[str], env: dict, cwd: Optional[str] = None) -> ForkedNode:
    """Fork the node of ``cmd`` (see ``node_module``) from this process's server for ``env``
    (one per environment: what the imports read, OMP_NUM_THREADS or PYTHONPATH, is fixed in it)."""
    key = tuple(sorted(env.items()))
    with _FORKERS_LOCK:
        forker = _FORKERS.get(key)
        if forker is None or not forker.alive:
            forker = _FORKERS[key] = _STARTER.submit(NodeForker, env).result()
    return forker.spawn(cmd, cwd)


# -- the server ------------------------------------------------------------------------------
def _preload() -> None:
    import importlib
    for name in PRELOAD:
        importlib.import_module(NODE_PACKAGE + name)
    for name in PRELOAD:  # each node runs its module afresh as __main__, as python -m would
        sys.modules.pop(NODE_PACKAGE + name, None)


def _serve(sock: socket.socket) -> Optional[dict]:
    """Fork a node per request; report pids and exit codes. Returns only in a forked child (its
    request); the server itself exits when the runner is gone and its children have exited."""
    children: dict[int, int] = {}  # pidfd -> pid
    server, ust = os.getpid(), _lttng_ust()
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    listening = True
    while listening or children:
        for fd, _ in poller.poll():
            if fd != sock.fileno():
                pid = children.pop(fd)
                poller.unregister(fd)
                os.close(fd)
                _, status = os.waitpid(pid, 0)
                _send(sock, {'pid': pid, 'code': os.waitstatus_to_exitcode(status)})
                continue
            try:
                data, fds, _, _ = socket.recv_fds(sock, 1 << 20, 1)
            except OSError:
                data, fds = b'', []
            if not data:
                listening = False
                poller.unregister(sock)
                continue
            request = json.loads(data)
            pid = _fork(ust)
            if pid == 0:
                _become_node(sock, list(children), request, fds[0], server)
                return request
            os.close(fds[0])
            pidfd = os.pidfd_open(pid)
            children[pidfd] = pid
            poller.register(pidfd, select.POLLIN)
            _send(sock, {'id': request['id'], 'pid': pid})
    return None


def _lttng_ust():
    """rclpy loads lttng-ust (ROS tracing), whose constructor starts two listener threads and
    whose destructor cancels them: in a plain fork's child they do not exist and the node
    segfaults at exit. lttng-ust's own fork hooks (what its LD_PRELOAD wrapper calls) restart them."""
    with open('/proc/self/maps') as maps:
        paths = {line.split()[-1] for line in maps if '/liblttng-ust-' in line or '/liblttng-ust.so' in line}
    paths = [p for p in paths if 'tracepoint' not in p]
    return ctypes.CDLL(paths[0]) if paths else None


def _fork(ust) -> int:
    if ust is None:
        return os.fork()
    sigset = ctypes.create_string_buffer(128)
    ust.ust_before_fork(sigset)
    pid = os.fork()
    (ust.ust_after_fork_child if pid == 0 else ust.ust_after_fork_parent)(sigset)
    return pid


def _send(sock: socket.socket, msg: dict) -> None:
    try:
        sock.send(json.dumps(msg).encode())
    except OSError:  # the runner is gone: its nodes are stopping (PR_SET_PDEATHSIG)
        pass


def _become_node(sock: socket.socket, pidfds: list[int], request: dict, out: int, server: int) -> None:
    """In the forked child: the process a fresh ``python -m`` would be, bar the imports."""
    from ..nodes.stop_signals import install
    install()  # a stop request from here on is kept for the node's loop (it installs the same handlers)
    sock.close()
    for fd in pidfds:
        os.close(fd)
    os.setsid()
    die_with_parent(server)
    _LIBC.prctl(PR_SET_NAME, request['module'].rsplit('.', 1)[-1][:15].encode(), 0, 0, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.chdir(request['cwd'])
    import numpy as np
    import torch
    np.random.seed()  # a fresh process's unseeded streams, not the server's
    torch.seed()


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the runner ends it (closing the socket), not a Ctrl-C
    _preload()
    request = _serve(sock)
    if request is None:  # the server's end: nothing to flush, and its stderr (the runner's) may be gone
        os._exit(0)
    import runpy
    sys.argv = [request['module'], *request['argv']]
    runpy.run_module(request['module'], run_name='__main__', alter_sys=True)


if __name__ == '__main__':
    main()
