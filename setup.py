"""Pure-Python install of rl_traj_ros (the `rl-traj-ros` CLI and the ROS-free core).

colcon builds this package with ament_cmake (package.xml build_type), which generates the
messages and installs the same Python package; this file is for `pip install -e .` in a venv
(tools/setup.sh) and for using the core without ROS.
"""
from setuptools import find_packages, setup

setup(
    name='rl_traj_ros',
    version='0.1.0',
    packages=find_packages(include=['rl_traj_ros', 'rl_traj_ros.*']),
    python_requires='>=3.10',
    install_requires=['numpy', 'torch', 'pyyaml', 'pyarrow', 'pillow', 'gymnasium'],
    entry_points={'console_scripts': ['rl-traj-ros = rl_traj_ros.cli:main']},
)
