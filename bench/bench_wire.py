"""PolicyPart over rclpy between two processes vs one raw uint8[] blob of the same bytes.

Payload: 8 envs, two 128x128x3 uint8 cameras (main + 1 extra view), 8-float states, task
strings, a chunk of C=8 7-dof actions, logprobs/values/versions. The PolicyPart side pays
the full conversion (tensors -> message on the publisher, message -> tensors on the
subscriber); the baseline publishes pre-made bytes into std_msgs/UInt8MultiArray and wraps
them with np.frombuffer. Both use RELIABLE/KEEP_ALL and an EventsExecutor subscriber.

    bash -c 'source env.sh && python bench/bench_wire.py [--count 300] [--reps 3]'
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

N_ENVS, HW, CHUNK, ADIM = 8, 128, 8, 7


def make_part():
    from rl_traj_ros.data.synthetic import SyntheticSpec, make_parts
    spec = SyntheticSpec(num_epochs=1, chunks_per_epoch=1, sources=((0, 0),), envs_per_source=N_ENVS, chunk=CHUNK,
                         action_dim=ADIM, image_hw=(HW, HW), num_extra_views=1)
    return next(make_parts(spec))[0]


def subscriber(kind: str, count: int) -> None:
    import numpy as np
    import rclpy
    from rclpy.experimental import EventsExecutor
    from std_msgs.msg import UInt8MultiArray
    from rl_traj_ros import msg as M
    from rl_traj_ros.ros import conversion as cv
    from rl_traj_ros.ros.qos import DATA_QOS
    rclpy.init()
    node = rclpy.create_node('bench_sub')
    state = {'n': 0, 't0': None, 't1': None, 'bytes': 0}

    def on_msg(m):
        if state['t0'] is None:
            state['t0'] = time.perf_counter()
            state['c0'] = time.process_time()
        if kind == 'part':
            p = cv.policy_part_from_msg(m)
            state['bytes'] = sum(t.numel() * t.element_size() for t in p.obs.values() if hasattr(t, 'numel'))
        else:
            state['bytes'] = np.frombuffer(m.data, np.uint8).nbytes
        state['n'] += 1
        if state['n'] == count:
            state['t1'] = time.perf_counter()
            state['c1'] = time.process_time()

    typ = M.PolicyPart if kind == 'part' else UInt8MultiArray
    node.create_subscription(typ, 'bench', on_msg, DATA_QOS)
    ex = EventsExecutor()
    ex.add_node(node)
    print('ready', flush=True)
    while state['t1'] is None:
        ex.spin_once(timeout_sec=0.1)
    # first message starts the clock: count-1 intervals
    print(f"done {count - 1} {state['t1'] - state['t0']:.6f} {state['c1'] - state['c0']:.6f}", flush=True)
    ex.shutdown()
    rclpy.try_shutdown()


def publish_run(kind: str, count: int, part, blob: bytes) -> tuple[float, int, float, float]:
    import rclpy
    from std_msgs.msg import UInt8MultiArray
    from rl_traj_ros import msg as M
    from rl_traj_ros.ros import conversion as cv
    from rl_traj_ros.ros.qos import DATA_QOS
    sub = subprocess.Popen([sys.executable, __file__, '--sub', kind, '--count', str(count)], stdout=subprocess.PIPE,
                           text=True)
    assert sub.stdout.readline().strip() == 'ready'
    node = rclpy.create_node('bench_pub')
    pub = node.create_publisher(M.PolicyPart if kind == 'part' else UInt8MultiArray, 'bench', DATA_QOS)
    while pub.get_subscription_count() == 0:
        time.sleep(0.01)
    time.sleep(0.3)
    size = 0
    c0 = time.process_time()
    for i in range(count):
        if kind == 'part':
            m = cv.policy_part_to_msg(part, i)
        else:
            m = UInt8MultiArray()
            m.data = blob
        if i == 0:
            from rclpy.serialization import serialize_message
            size = len(serialize_message(m))
        pub.publish(m)
    pub_cpu = (time.process_time() - c0) / count
    out = sub.stdout.readline().split()
    sub.wait(30)
    node.destroy_node()
    n, dt, sub_cpu = int(out[1]), float(out[2]), float(out[3]) / int(out[1])
    return n / dt, size, pub_cpu, sub_cpu


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument('--count', type=int, default=300)
    ap.add_argument('--reps', type=int, default=3)
    ap.add_argument('--sub', choices=['part', 'blob'])
    args = ap.parse_args()
    if args.sub:
        return subscriber(args.sub, args.count)
    import rclpy
    from rl_traj_ros.ros import conversion as cv
    from rclpy.serialization import serialize_message
    rclpy.init()
    part = make_part()
    nbytes = len(serialize_message(cv.policy_part_to_msg(part)))
    blob = os.urandom(nbytes - 60)  # same serialized size as the PolicyPart (minus the blob msg's own header)
    rates = {'part': [], 'blob': []}
    cpu = {'part': [], 'blob': []}
    sizes = {}
    for _ in range(args.reps):  # interleaved so machine noise hits both alike
        for kind in ('part', 'blob'):
            r, sizes[kind], pc, sc = publish_run(kind, args.count, part, blob)
            rates[kind].append(r)
            cpu[kind].append(pc + sc)
    rclpy.try_shutdown()
    print(f'transport: ROS_AUTOMATIC_DISCOVERY_RANGE={os.environ.get("ROS_AUTOMATIC_DISCOVERY_RANGE", "")} '
          f'FASTDDS_BUILTIN_TRANSPORTS={os.environ.get("FASTDDS_BUILTIN_TRANSPORTS", "")}')
    for kind, label in (('part', 'PolicyPart (convert+publish, receive+decode)'), ('blob', 'raw uint8[] blob')):
        med = statistics.median(rates[kind])
        print(f'{label:<46} {sizes[kind] / 1e6:6.3f} MB/msg  {med:8.1f} msgs/s  {med * sizes[kind] / 1e6:8.1f} MB/s  '
              f'{statistics.median(cpu[kind]) * 1e6:7.0f} CPU us/msg (pub+sub)  '
              f'(runs: {", ".join(f"{r:.0f}" for r in rates[kind])} msgs/s)')
    print(f'ratio PolicyPart / blob: {statistics.median(rates["part"]) / statistics.median(rates["blob"]):.2f} (msgs/s), '
          f'{statistics.median(cpu["blob"]) / statistics.median(cpu["part"]):.2f} (inverse CPU per msg)')


if __name__ == '__main__':
    main()
