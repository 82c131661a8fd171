"""``run``'s options: each pipeline takes the ones it reads and refuses, by name, any other one
given (an option that would be silently ignored, e.g. ``sim_train --policy``), and what it takes
reaches the nodes (``sim_train --num-envs``)."""
import inspect
import re

import pytest

from rl_traj_ros import cli
from rl_traj_ros.pipelines import real_collect, real_eval, real_train, sim_collect, sim_train, train_reward

ENTRY = {'sim_collect': [sim_collect.main], 'sim_train': [sim_train.main], 'sim_eval': [sim_train.eval_main],
         'real_collect': [real_collect.main, real_collect.run_nodes],  # run_nodes: quiet, run id and secret
         'real_train': [real_train.main, real_collect.run_nodes], 'real_eval': [real_eval.main, real_collect.run_nodes],
         'train_reward': [train_reward.main]}
CLI_READS = {'sim_train': {'algo', 'config'}, 'sim_eval': {'algo', 'config'}}  # the default config follows --algo


def reads(functions) -> set[str]:
    src = ''.join(inspect.getsource(f) for f in functions)
    return set(re.findall(r"\bargs\.(\w+)", src)) | set(re.findall(r"getattr\(args, '(\w+)'", src))


@pytest.mark.parametrize('pipeline', sorted(ENTRY))
def test_the_table_is_what_each_pipeline_reads(pipeline):
    assert cli.PIPELINE_OPTIONS[pipeline] == reads(ENTRY[pipeline]) | CLI_READS.get(pipeline, set()) | {'config'}


def test_an_option_the_pipeline_would_ignore_is_refused_by_name(tmp_path, capsys):
    rc = cli.main(['run', 'sim_train', '--num-envs', '2', '--policy', 'mlp', '--no-images', '--robot-ip', '10.0.0.2',
                   '--output-dir', str(tmp_path / 'out')])
    err = capsys.readouterr().err
    assert rc == 2
    assert 'run sim_train does not take --image-obs/--no-images, --policy, --robot-ip (it would be ignored)' in err
    assert '--num-envs' not in err.split('it takes')[0]
    assert not (tmp_path / 'out').exists()   # refused before anything started
    assert cli.main(['run', 'real_eval', '--in-process']) == 2
    assert 'run real_eval does not take --in-process' in capsys.readouterr().err


def test_sim_train_num_envs_reaches_every_node(tmp_path):
    default = sim_train.train_params(sim_train.DEFAULT_CONFIG, 1, str(tmp_path))['franka_env_node']['num_envs']
    p = sim_train.train_params(sim_train.DEFAULT_CONFIG, 1, str(tmp_path), num_envs=default + 1)
    assert {n: p[n]['num_envs'] for n in p} == {n: default + 1 for n in p}


def test_every_option_the_docs_show_is_taken_by_its_pipeline():
    """The README's and docs' ``run PIPELINE ...`` commands (optional parts in brackets too) pass
    only options their pipeline takes: the CLI would refuse the others."""
    from rosutil import ROOT
    seen = 0
    for doc in [ROOT / 'README.md', *sorted((ROOT / 'docs').glob('*.md'))]:
        text = re.sub(r'\\\n\s*', ' ', doc.read_text())   # continued lines
        for pipeline, rest in re.findall(r'(?:tools/run\.sh|rl_traj_ros\.cli) run ([a-z_]+)([^`|&;#\n]*)', text):
            taken = {'--' + k.replace('_', '-') for k in cli.PIPELINE_OPTIONS[pipeline]}
            if 'image_obs' in cli.PIPELINE_OPTIONS[pipeline]:
                taken |= {'--no-images', '--image-obs'}
            for opt in re.findall(r'(--[a-z][a-z-]*)', rest):
                assert opt in taken | {'--help', '--quiet'}, f'{doc.name}: run {pipeline} ... {opt}'
                seen += 1
    assert seen > 20
