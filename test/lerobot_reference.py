"""LeRobot's own actions for a recorded evaluation, to compare with what the policy node sent.

    <lerobot python> test/lerobot_reference.py DATASET CHECKPOINT --steps C

Runs under the LeRobot interpreter and uses only stock LeRobot: the dataset with
``LeRobotDataset``, the checkpoint with ``get_policy_class(type).from_pretrained`` and
``make_pre_post_processors`` (``n_action_steps`` = C, as ``--policy.n_action_steps`` sets it),
and per episode LeRobot's synchronous loop: ``policy.reset()``, then for every frame
``prepare_observation_for_inference`` -> preprocessor -> ``select_action`` -> postprocessor.
Prints one line ``frames=N max_abs_diff=X`` comparing those actions with the dataset's recorded
``action`` (what the env executed, sent by the policy node).
"""
import argparse

import numpy as np
import torch
from lerobot.configs.policies import PreTrainedConfig
from lerobot.datasets import LeRobotDataset
from lerobot.policies.factory import get_policy_class, make_pre_post_processors
from lerobot.policies.utils import prepare_observation_for_inference


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument('dataset')
    ap.add_argument('checkpoint')
    ap.add_argument('--steps', type=int, required=True)
    args = ap.parse_args()
    cfg = PreTrainedConfig.from_pretrained(args.checkpoint)
    cfg.device, cfg.n_action_steps = 'cpu', args.steps
    policy = get_policy_class(cfg.type).from_pretrained(args.checkpoint, config=cfg).eval()
    pre, post = make_pre_post_processors(cfg, pretrained_path=args.checkpoint)
    ds = LeRobotDataset('local/eval', root=args.dataset)
    keys = list(cfg.input_features)
    worst, frames, last_ep = 0.0, 0, None
    with torch.inference_mode():
        for i in range(len(ds)):
            item = ds[i]
            ep = int(item['episode_index'])
            if ep != last_ep:
                policy.reset(), pre.reset(), post.reset()
                last_ep = ep
            obs = {}
            for k in keys:
                v = item[k]
                if 'image' in k:  # the dataset's float CHW in [0, 1] back to the camera's uint8 HWC
                    v = (v * 255).round().to(torch.uint8).permute(1, 2, 0)
                obs[k] = v.numpy()
            action = post(policy.select_action(pre(prepare_observation_for_inference(obs, torch.device('cpu'),
                                                                                        item.get('task', ''), ''))))
            worst = max(worst, float(np.abs(action[0].numpy() - item['action'].numpy()).max()))
            frames += 1
    print(f'frames={frames} max_abs_diff={worst:.3g}')


if __name__ == '__main__':
    main()
