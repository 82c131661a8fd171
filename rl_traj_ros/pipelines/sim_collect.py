"""The sim collection pipeline without `launch`: the same nodes, the same YAML.

``run_ros`` starts the four node kinds as separate processes (``ros_run.RosRun``, one per env
node) with the params file, streams their output, waits for the env nodes to finish, waits until the
writer has stored everything the collector flushed, then stops every node with SIGINT (each
flushes). ``run_inprocess`` runs the same workers, collector and buffer in one process
without ROS: the reference for the end-to-end test and the baseline of the benchmark.
"""
from __future__ import annotations

import copy
import signal
import sys
import time
from pathlib import Path
from typing import Any, Optional

import yaml

from ..params.paths import config_path

NODES = ('franka_env_node', 'policy_node', 'trajectory_collector_node', 'replay_buffer_writer_node')
DEFAULT_CONFIG = config_path('sim_collect.yaml')


def load_params(path: str | Path, nodes: tuple[str, ...] = NODES) -> dict[str, dict[str, Any]]:
    """Effective parameters per node kind: '/**' merged under '/**/<node>'."""
    raw = yaml.safe_load(Path(path).read_text()) or {}
    common = (raw.get('/**') or {}).get('ros__parameters', {})
    out = {}
    for node in nodes:
        own = (raw.get(f'/**/{node}') or {}).get('ros__parameters', {})
        out[node] = {**common, **own}
    return out


def params_yaml(params: dict[str, dict[str, Any]]) -> str:
    from .ros_run import dump_params
    return dump_params({f'/**/{n}': {'ros__parameters': p} for n, p in params.items()})


def apply_overrides(params: dict, num_env_nodes: int, num_envs: Optional[int] = None,
                    episodes: Optional[int] = None, output_dir: Optional[str] = None,
                    policy: Optional[str] = None, image_obs: Optional[bool] = None,
                    steps: Optional[int] = None, run_id: Optional[str] = None,
                    image_storage: Optional[str] = None, checkpoint: Optional[str] = None,
                    observation: Optional[str] = None, eval_episodes: Optional[int] = None) -> dict:
    """Effective per-node parameters of one run. Every run gets a ``run_id`` (the collector
    stamps it into each TrajectoryId), so a restarted collector rebuilds the same identities
    and a second run into the same buffer directory appends.

    ``policy`` 'lerobot' with a ``checkpoint`` is an evaluation: the env renders the cameras
    at the checkpoint's image size, with the observation its ``observation.state`` was
    recorded with (unless ``observation`` is given), on the held-out state ids, until
    ``eval_episodes`` (20) episodes ended; every episode is recorded, failures too."""
    from ..data.identity import new_run_id
    p = copy.deepcopy(params)
    p['trajectory_collector_node']['run_id'] = run_id or p['trajectory_collector_node'].get('run_id') or new_run_id()
    if num_envs is not None:
        for n in NODES:
            p[n]['num_envs'] = num_envs
    if episodes is not None:  # total successes, spread over the env nodes
        p['franka_env_node']['target_successes'] = -(-episodes // num_env_nodes)
    if steps is not None:
        p['franka_env_node']['num_steps'] = steps
        if episodes is None:
            p['franka_env_node']['target_successes'] = 0
    if output_dir is not None:
        p['franka_env_node']['collect_dir'] = str(Path(output_dir) / 'collected_data')
        p['replay_buffer_writer_node']['output_dir'] = str(Path(output_dir) / 'replay_buffer')
    if policy is not None:
        p['policy_node']['policy'] = policy
    if image_obs is not None:
        p['franka_env_node']['image_obs'] = image_obs
    if image_storage is not None:
        p['franka_env_node']['image_storage'] = image_storage
    if p['policy_node'].get('policy') == 'lerobot':
        pe = p['franka_env_node']
        if not checkpoint and not p['policy_node'].get('checkpoint'):
            raise ValueError("policy 'lerobot' needs --checkpoint: lerobot-train's .../checkpoints/<N>/pretrained_model")
        if checkpoint:
            p['policy_node']['checkpoint'] = str(Path(checkpoint).resolve())
        seen = checkpoint_observation(p['policy_node']['checkpoint'])
        p['policy_node']['camera_names'] = pe['camera_names'] = list(pe.get('camera_names') or ['front', 'wrist'])
        pe.update(image_obs=True, observation=observation or seen['observation'], image_size=seen['image_size'],
                  state_split='eval', target_successes=0, target_episodes=eval_episodes or 20, num_steps=0,
                  only_success=False)
        p['policy_node']['image_size'] = seen['image_size']
    elif observation is not None:
        p['franka_env_node']['observation'] = observation
    if p['franka_env_node'].get('observation') == 'pixels':
        from ..envs.sim_franka import PROPRIO_DIM
        p['policy_node']['state_dim'] = PROPRIO_DIM
    p['trajectory_collector_node']['env_ranks'] = list(range(num_env_nodes))
    p['franka_env_node']['num_env_nodes'] = num_env_nodes
    return p


def checkpoint_observation(checkpoint: str) -> dict:
    """What the sim must send a LeRobot checkpoint, read from its config.json: 'pixels' when its
    ``observation.state`` has the 18 proprioceptive values, 'state' for 21; the image size."""
    import json
    from ..envs.sim_franka import PROPRIO_DIM
    from ..policies.lerobot_policy import IMAGE_PREFIX, STATE_KEY, pretrained_dir
    feats = json.loads((pretrained_dir(checkpoint) / 'config.json').read_text()).get('input_features', {})
    state = feats.get(STATE_KEY, {}).get('shape', [0])[0]
    sizes = {f['shape'][1] for k, f in feats.items() if k.startswith(IMAGE_PREFIX)}
    if len(sizes) > 1:
        raise ValueError(f'checkpoint {checkpoint}: cameras of different sizes {sorted(sizes)}; the sim renders one')
    return {'observation': 'pixels' if state == PROPRIO_DIM else 'state', 'image_size': sizes.pop() if sizes else 128}


# -- in one process, no ROS ----------------------------------------------------------------------
def run_inprocess(params: dict, num_env_nodes: int, output_dir: Optional[str] = None, learner=None) -> dict:
    """The same workers, policy server, collector, exactly-once sink and buffer as the nodes, in
    one process, with function calls for topics: parts take the policy node's path
    (``PolicyServer``: admitted, answered, kept until the collector settles their keys), outputs
    the writer node's (``ExactlyOnceSink.offer``) and acknowledgements the collector node's
    (``TrajectoryCollector.acknowledge``). With a ``learner`` (``run sim_train --in-process``)
    every output also goes to it and its updates to the policy server as weights, and a request
    waits as the policy node makes it wait (``max_version_lag``): the previous chunk's EnvPart
    is completed at once, the new chunk is answered once its weights are in."""
    from ..collect.collector import TrajectoryCollector
    from ..data.identity import new_run_id
    from ..delivery.sink import ExactlyOnceSink
    from ..rollout.policy_server import PolicyServer, PolicyTransport
    from ..params.spec import resolve
    from ..params.writer_node import WRITER_NODE
    from ..params.env_node import ENV_NODE
    from ..assembly import make_buffer, make_env, make_plan, make_policy_worker, rollout_config
    from ..rollout.workers import EnvWorker
    pe, pc = params['franka_env_node'], params['trajectory_collector_node']
    pw = resolve(WRITER_NODE, params['replay_buffer_writer_node'])
    policy = make_policy_worker(params['policy_node'])
    plan = make_plan(pc)
    collector = TrajectoryCollector(plan, pc.get('run_id') or new_run_id())
    buf_dir = str(Path(output_dir) / 'replay_buffer') if output_dir else pw['output_dir']
    buffer = make_buffer(params['replay_buffer_writer_node'], buf_dir)  # the writer node's, max_pending_writes too
    sink = ExactlyOnceSink(buffer, pw['dedupe_window'])
    rejected: list[str] = []
    workers, envs = [], []
    for rank in range(num_env_nodes):
        cfg = rollout_config(pe, rank)
        # the env node's own env (its reward_source, steps_after_success, recorder), not a copy of it
        collect = bool(pe.get('collect_episodes') and output_dir)
        env = make_env(resolve(ENV_NODE, {**pe, 'num_env_nodes': num_env_nodes, 'env_rank': rank, 'collect_episodes': collect,
                                          **({'collect_dir': str(Path(output_dir) / 'collected_data')} if collect else {})}))
        envs.append(env)
        workers.append(EnvWorker(cfg, env))
    replies: dict = {}     # chunk key -> actions: the policy server's answers, as the env node receives them
    updates: list = []
    t_data = 0.0

    def fail(why: str):   # what the node logs and survives is a bug here: no transport garbles a message
        raise RuntimeError(why)

    def answer(chunk):
        replies[chunk.sources[0].key] = chunk.actions
        return chunk

    def store(part) -> None:
        for o in collector.push(part):
            offer = sink.offer(o.trajectory, block=True)
            if offer.verdict == 'rejected':
                rejected.append(offer.reason)
            if learner is None:
                continue
            # PPO updates when a step completes; RLPD takes the whole gradient-step budget the new data allows
            for up in (learner.offer(o.trajectory), learner.train(1 << 30)):
                if up is not None:
                    updates.append(up)
                    server.weights(up.version, lambda up=up: up.state_dict, 'in process')
        collector.acknowledge(sink.take_acks())
        server.ack(collector.take_settled())

    # the policy node's protocol; the learner is present from the start (no announcement to wait for)
    lag = int(params['policy_node'].get('max_version_lag', -1)) if learner else -1
    server = PolicyServer(policy, PolicyTransport(answer, lambda sent: None, lambda part, version: part,
                                                  lambda part: part, store, store, lambda: 1),
                          lag, None, 3600.0, lambda line: None, fail)
    server.gate.learner_seen = learner is not None
    if learner is not None and learner.version > policy.model_version:  # a resumed learner's announcement
        server.weights(learner.version, learner.model.state_dict, 'resumed')

    t0 = time.perf_counter()
    gens = [w.run() for w in workers]
    reqs = [next(g) for g in gens]
    sent = [False] * len(gens)
    live = list(range(len(gens)))
    while live:
        progressed, answered = False, len(replies)
        for i in list(live):
            req = reqs[i]
            key = req.sources[0].key if req.sources else None
            if not sent[i]:   # answered now, or held for its weights (its previous EnvPart goes out at once)
                t1 = time.perf_counter()
                server.request(req)
                t_data += time.perf_counter() - t1
                sent[i] = True
            if key is not None and key not in replies:
                continue  # waits for the weights of an update another env node's rows complete
            progressed, sent[i] = True, False
            try:
                reqs[i] = gens[i].send(replies.pop(key) if key is not None else None)
            except StopIteration:
                live.remove(i)
        if not progressed and len(replies) == answered:
            raise RuntimeError(f'every env waits for weights the learner cannot produce (pending steps '
                               f'{learner.pending_steps if learner is not None else []})')
    loop = time.perf_counter() - t0  # like the env node's loop_s: without the final flush and close
    buffer.close()
    policy.close()
    collector.acknowledge(sink.take_acks())
    for e in envs:
        e.close()
    wall = time.perf_counter() - t0
    stats = [w.stats for w in workers]
    return {'wall_s': wall, 'loop_s': loop, 'data_path_s': t_data, 'env_s': sum(s.env_time_s for s in stats),
            'chunks': sum(s.chunks for s in stats), 'episodes': sum(s.episodes for s in stats),
            'successes': sum(s.successes for s in stats), 'replay_buffer': buf_dir,
            'collector': {**collector.stats, 'unsettled_keys': collector.ledger.unsettled(),
                          'open_episodes': len(collector.open_episodes())},
            'writer': {**sink.counters, 'trajectories': len(buffer)}, 'rejected': rejected, 'updates': updates}


# -- as ROS 2 processes --------------------------------------------------------------------------
def run_ros(params: dict, num_env_nodes: int, workdir: str, quiet: bool = False, drain_timeout_s: float = 120.0,
            extra_nodes: Optional[dict[str, tuple[str, list[str]]]] = None) -> dict:
    """The pipeline's nodes as processes (``RosRun``): until the env nodes finished and the
    writer stored everything; then every node is stopped with SIGINT (each flushes)."""
    from .ros_run import RosRun
    return RosRun(params_yaml(params), workdir, quiet).run(num_env_nodes, drain_timeout_s, extra_nodes)


DEFAULT_OUTPUT_ROOT = 'outputs/sim_collect'


def main(args) -> int:
    from .run_dir import existing_datasets, new_run_dir
    if args.output_dir:
        out = Path(args.output_dir)
        taken = existing_datasets(out / 'collected_data')
        if taken:
            print(f'[sim_collect] a LeRobot dataset already exists in {", ".join(map(str, taken))}; choose a new '
                  f'--output-dir (or leave it out: every run gets {DEFAULT_OUTPUT_ROOT}/<timestamp>/)', file=sys.stderr)
            return 2
    else:
        out = new_run_dir(DEFAULT_OUTPUT_ROOT)
    try:
        params = apply_overrides(load_params(args.config), args.num_env_nodes, args.num_envs, args.episodes,
                                 str(out), args.policy, args.image_obs, args.steps,
                                 image_storage=args.image_storage, checkpoint=args.checkpoint,
                                 observation=args.observation, eval_episodes=args.eval_episodes or None)
    except ValueError as e:
        print(f'[sim_collect] refused: {e}', file=sys.stderr)
        return 2
    print(f'[sim_collect] output: {out.resolve()}', flush=True)
    if args.in_process:
        r = run_inprocess(params, args.num_env_nodes, str(out))
    else:
        from .ros_run import adopt_identity
        r = run_ros(adopt_identity(params, args.run_id, args.secret_file), args.num_env_nodes, str(out),
                    quiet=args.quiet)
    rate = r['successes'] / r['episodes'] if r['episodes'] else 0.0
    print(f"\n[sim_collect] {r['episodes']} episodes, {r['successes']} successful ({rate:.0%}), "
          f"{r['chunks']} chunks in {r['wall_s']:.1f} s ({r['chunks'] / max(r['wall_s'], 1e-9):.1f} chunks/s)")
    if params['franka_env_node'].get('state_split') == 'eval':
        print(f"[sim_collect] held-out success: {r['successes']}/{r['episodes']} episodes ({rate:.0%}) of policy "
              f"'{params['policy_node']['policy']}' on held-out state ids")
    print(f"[sim_collect] replay buffer: {out / 'replay_buffer'}")
    if params['franka_env_node'].get('collect_episodes'):
        from ..params.env_node import ENV_NODE
        from ..params.spec import resolve
        fmt = resolve(ENV_NODE, params['franka_env_node'])['export_format']   # a YAML may leave it to the default
        for d in sorted((out / 'collected_data').glob('env_*')):
            print(f"[sim_collect] {fmt} dataset: {d}")
    print(f"[sim_collect] collector: {r['collector']}")
    print(f"[sim_collect] writer: {r['writer']}")
    if not args.in_process:
        bad = {n: c for n, c in r['exit_codes'].items() if c not in (0, -signal.SIGINT)}
        if bad or r['failed']:
            print(f'[sim_collect] FAILED nodes: {bad or r["failed"]}')
            return 1
        if r['collector'].get('unacked', 0):
            print(f"[sim_collect] FAILED: {int(r['collector']['unacked'])} trajectories were never acknowledged "
                  'as stored by the writer')
            return 1
    if r['writer'].get('rejected', 0):
        print(f"[sim_collect] FAILED: the writer rejected {int(r['writer']['rejected'])} trajectories (see its log)")
        return 1
    if r.get('interrupted'):
        print(f"[sim_collect] interrupted ({r['interrupted']}): every node stopped and flushed what it held")
    target = params['franka_env_node'].get('target_successes', 0) * args.num_env_nodes
    if target and r['successes'] < target and not r.get('interrupted'):
        print(f'[sim_collect] only {r["successes"]} of {target} successful episodes (step cap reached)')
        return 1
    return 0
