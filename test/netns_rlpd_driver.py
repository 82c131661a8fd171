"""Runs inside the 'trainer' namespace: RLPD with the robot's side (env, policy, collector nodes)
on host 'env' and the writer and the learner here; cuts the link between the hosts for
``seconds`` once the learner's weights are acting; prints what the test checks as JSON."""
import json
import subprocess
import sys
import time

sys.path.insert(0, 'test')
from faults import FaultRun  # noqa: E402
from rl_traj_ros.pipelines import sim_train as st  # noqa: E402


def main():
    out, demos, env_ns, sw, sw_if, seconds, steps = sys.argv[1:8]
    seconds, steps = float(seconds), int(steps)
    p = st.train_params(st.RLPD_CONFIG, 1, out, steps, algo='rlpd', demos=demos)
    p['policy_node'].update(resend_after_s=10.0)
    p['trajectory_collector_node'].update(resend_after_s=10.0, pending_timeout_s=600.0)
    p['learner_node'].update(publish_every=10, publish_period_s=1.0)
    times = {}

    def chaos(ctl):
        ctl.wait_stat('env_0', 'chunks', 20)  # mid-run, whatever the start-up took
        ctl.wait_log('learner', '-> v2:', timeout_s=120)  # versions are flowing before the cut
        times['cut'] = time.time()
        subprocess.run(['ip', '-n', sw, 'link', 'set', sw_if, 'down'], check=True)
        time.sleep(seconds)
        subprocess.run(['ip', '-n', sw, 'link', 'set', sw_if, 'up'], check=True)
        times['restored'] = time.time()

    robot = ['ip', 'netns', 'exec', env_ns]
    run = FaultRun(p, out, chaos, prefix={'env_0': robot, 'policy': robot, 'collector': robot})
    r = run.run(1, 240, extra_nodes={'learner': ('learner_node', [])})
    print(json.dumps({'times': times, 'exit_codes': r['exit_codes'], 'chunks': r['chunks'],
                      'env_log': ''.join(r['logs']['env_0']), 'learner_log': ''.join(r['logs']['learner'])[-6000:]}))


if __name__ == '__main__':
    main()
