"""Runs inside the 'trainer' namespace: the sim pipeline with the env node on host A and the
writer on host C, injecting a link cut or packet loss; prints the audit as JSON."""
import json
import sys
import time

sys.path.insert(0, 'test')
from faults import run_with_faults  # noqa: E402
from rl_traj_ros.pipelines import sim_collect as sc  # noqa: E402


def main():
    out, env_ns, writer_ns, sw, sw_if, mode, seconds, steps = sys.argv[1:9]
    seconds, steps = float(seconds), int(steps)
    p = sc.apply_overrides(sc.load_params(sc.DEFAULT_CONFIG), num_env_nodes=1, num_envs=2, steps=steps,
                           output_dir=out, image_obs=False)
    for n in sc.NODES:
        p[n].update(num_epochs=1, chunks_per_epoch=10)
    p['franka_env_node'].update(collect_episodes=False, camera_topic_rate_hz=0.0)
    p['policy_node'].update(resend_after_s=10.0)
    p['trajectory_collector_node'].update(resend_after_s=10.0, pending_timeout_s=600.0)
    events = []

    def chaos(ctl):
        import subprocess
        if mode == 'cut':
            ctl.wait_stat('env_0', 'chunks', 20)  # mid-run, whatever the start-up took
            events.append(('cut', ctl.procs['env_0'].poll() is None))
            subprocess.run(['ip', '-n', sw, 'link', 'set', sw_if, 'down'], check=True)
            time.sleep(seconds)
            subprocess.run(['ip', '-n', sw, 'link', 'set', sw_if, 'up'], check=True)
            events.append(('restored', ctl.procs['env_0'].poll() is None))

    prefix = {'env_0': ['ip', 'netns', 'exec', env_ns], 'writer': ['ip', 'netns', 'exec', writer_ns]}
    r = run_with_faults(p, 1, out, chaos, drain_timeout_s=240, prefix=prefix)
    print(json.dumps({'events': events, 'exit_codes': r['exit_codes'], 'chunks': r['chunks'],
                      'collector': r['collector'], 'writer': r['writer'],
                      'policy_log': ''.join(r['logs']['policy'])[-1500:]}))


if __name__ == '__main__':
    main()
