"""Image-based RLPD end to end (its own file, so that the two test workers can balance it against
the DDS loop tests): camera demos from the sim expert, then `run sim_train --algo rlpd` with the
CNN encoder in the actor and the critics."""
import json

import torch
import yaml

from rl_traj_ros.learning.rlpd_learner import load_demos
from rl_traj_ros.storage.files import load_trajectory

from rosutil import ROOT
from test_rlpd_loop import _cli


def test_image_based_rlpd_learns_from_camera_demos_end_to_end(tmp_path):
    """Cameras all the way: expert demos recorded with the sim's cameras, then `run sim_train
    --algo rlpd` with the CNN encoder in the actor and the critics (random shifts on every batch),
    in one process (the same collector, buffers and learner as the nodes): the stored rows and
    both buffers hold the images, versions come out and the actor acts on images."""
    demos = tmp_path / 'demos'
    _cli('sim_collect', '--config', 'config/sim_demos.yaml', '--episodes', '2', '--output-dir', str(demos),
         '--in-process', '--image-obs')
    d = load_demos(demos / 'replay_buffer').sample(4)
    assert d['curr_obs/main_images'].shape == (4, 128, 128, 3) and d['next_obs/main_images'].dtype == torch.uint8
    cfg = yaml.safe_load((ROOT / 'config' / 'sim_train_rlpd.yaml').read_text())
    cfg['/**/franka_env_node']['ros__parameters'].update(image_obs=True)
    cfg['/**/policy_node']['ros__parameters'].update(use_images=True)
    cfg['/**/learner_node']['ros__parameters'].update(use_images=True, publish_every=5, batch_size=32)
    (tmp_path / 'rlpd_images.yaml').write_text(yaml.safe_dump(cfg))
    run = tmp_path / 'run'
    _cli('sim_train', '--algo', 'rlpd', '--config', str(tmp_path / 'rlpd_images.yaml'), '--demos-dir',
         str(demos / 'replay_buffer'), '--steps', '2', '--output-dir', str(run), '--in-process')
    lines = [json.loads(x) for x in (run / 'metrics.jsonl').read_text().splitlines()]
    assert lines and lines[-1]['updates'] > 0 and lines[-1]['online_rows'] == 2 * 10 * 2, lines[-1:]
    ckpt = torch.load(run / 'learner' / 'learner_checkpoint.pt', weights_only=True)
    critics, target = ckpt['rlpd']['critics'], ckpt['rlpd']['target']
    # the target is a copy of the critics made at start and Polyak-averaged since: the critics' CNN moved
    assert not torch.equal(critics['encoder.net.0.weight'], target['encoder.net.0.weight'])
    from rl_traj_ros.params.policy_node import POLICY_NODE
    from rl_traj_ros.params.spec import resolve
    from rl_traj_ros.pipelines.sim_collect import load_params
    from rl_traj_ros.pipelines.sim_train import TRAIN_NODES
    from rl_traj_ros.assembly import sac_actor
    pp = resolve(POLICY_NODE, load_params(tmp_path / 'rlpd_images.yaml', TRAIN_NODES)['policy_node'])
    fresh = sac_actor(pp).state_dict()   # the actor as this config initializes it (seeded)
    assert not torch.equal(ckpt['rlpd']['actor']['encoder.net.0.weight'], fresh['encoder.net.0.weight'])   # and the actor's
    index = json.loads((run / 'replay_buffer' / 'trajectory_index.json').read_text())
    rows = [load_trajectory(run / 'replay_buffer' / f'trajectory_{int(s):08d}.pt', 'pt') for s in index['trajectories']]
    assert all(r['curr_obs/main_images'].shape[-3:] == (128, 128, 3) for r in rows)
    assert max(int(r['versions'].max()) for r in rows) >= 1   # the image actor's versions acted


def test_pixels_rlpd_commands_learn_from_the_cameras_without_the_cube_position(tmp_path):
    """The README's two pixels lines, shortened: camera demos with `config/sim_demos_pixels.yaml`,
    then `run sim_train --algo rlpd --config config/sim_train_rlpd_pixels.yaml` over DDS (the
    learner's first step and its encoder pretraining after 40 control steps instead of 400, a few
    pretraining passes, bounded staleness so versions act in a short run). What the policy and the
    learner see has no cube position; the learner pretrained the keypoint encoder on the demos' and
    the first rollouts' frames; the image actor's versions acted."""
    demos = tmp_path / 'demos'
    _cli('sim_collect', '--config', 'config/sim_demos_pixels.yaml', '--episodes', '2', '--output-dir', str(demos))
    d = load_demos(demos / 'replay_buffer', cameras=2).sample(4)
    assert d['curr_obs/states'].shape == (4, 18) and d['curr_obs/main_images'].shape == (4, 64, 64, 3)
    assert d['curr_obs/extra_view_images'].shape == (4, 1, 64, 64, 3)
    # the cube only as privileged_states (the expert's), never in the states the policy sees
    assert torch.equal(d['curr_obs/privileged_states'][:, :18], d['curr_obs/states'])
    cfg = yaml.safe_load((ROOT / 'config' / 'sim_train_rlpd_pixels.yaml').read_text())
    cfg['/**/learner_node']['ros__parameters'].update(min_online_steps=40, encoder_pretrain_epochs=2,
                                                      publish_every=5, batch_size=32)
    cfg['/**/policy_node']['ros__parameters'].update(max_version_lag=2)
    (tmp_path / 'pixels.yaml').write_text(yaml.safe_dump(cfg))
    run = tmp_path / 'run'
    _cli('sim_train', '--algo', 'rlpd', '--config', str(tmp_path / 'pixels.yaml'), '--demos-dir',
         str(demos / 'replay_buffer'), '--steps', '4', '--output-dir', str(run))
    lines = [json.loads(x) for x in (run / 'metrics.jsonl').read_text().splitlines()]
    assert lines and lines[0]['encoder_pretrain_frames'] > load_demos(demos / 'replay_buffer').total_samples
    ckpt = torch.load(run / 'learner' / 'learner_checkpoint.pt', weights_only=True)
    assert bool(ckpt['rlpd']['actor']['encoder.frozen']) and not any(k.startswith('encoder')
                                                                      for k in ckpt['rlpd']['critics'])
    index = json.loads((run / 'replay_buffer' / 'trajectory_index.json').read_text())
    rows = [load_trajectory(run / 'replay_buffer' / f'trajectory_{int(s):08d}.pt', 'pt') for s in index['trajectories']]
    assert all(r['curr_obs/states'].shape[-1] == 18 and r['curr_obs/main_images'].shape[-3:] == (64, 64, 3)
               for r in rows)
    assert max(int(r['versions'].max()) for r in rows) >= 1   # the image actor's versions acted
