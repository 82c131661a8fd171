"""Parameters of ``franka_env_node`` (sim or franky)."""
from .shared import SHARED, STOP_DEADLINE
from .spec import Param, pick

ENV_NODE = {
    **pick(SHARED, 'diagnostics_period_s', 'num_envs', 'chunk', 'action_dim', 'num_epochs', 'chunks_per_epoch',
           'image_size', 'num_env_nodes', 'camera_names'),
    'require_signed': Param(False, "refuse commands (ActionChunk, Intervention) that are unsigned or not signed "
                                   "with this run's secret_file", per={'franky': True}),
    'autostart': Param(True, 'configure and activate at start-up; false: wait for lifecycle transitions '
                             '(ros2 lifecycle set, the real-robot launch)'),
    'env_rank': Param(0, 'global rank of this env worker (TrajectoryKey.env_rank)'),
    'stage_id': Param(0, 'pipeline stage of this worker'),
    'num_steps': Param(1, 'training steps to run (with target_successes: a cap; 0 = none)', (0, 1 << 40)),
    'start_step': Param(0, 'first step_id (keys stay unique when a run appends to stored data)', (0, 1 << 40)),
    'target_successes': Param(0, 'stop at the next step boundary after this many successful episodes', (0, 1 << 40)),
    'target_episodes': Param(0, 'stop at the next step boundary after this many episodes ended (evaluation; '
                                '0 = no such stop)', (0, 1 << 40)),
    'seed': Param(0, 'env seed'),
    'torch_threads': Param(1, 'torch intra-op threads of the env node (0: the cores less one): its success '
                              'classifier (reward_source classifier) scores one frame per step, where more threads '
                              'only add barrier waits, and a waiting thread costs a time slice on cores that render '
                              'and learn (2 busy cores: 4-11 ms per frame on 2 threads, 1.1-1.4 ms on 1: '
                              'bench/bench_classifier_threads.py)', (0, 4096)),
    'image_obs': Param(False, 'render the front and wrist cameras'),
    'observation': Param('state', "what the policy sees: 'state' (sim: 21 states with the cube's xyz; franky: its 21 "
                                  "robot states) or 'pixels' (proprioception and cameras, no object state: sim 18 "
                                  "states + cameras, needs image_obs; franky needs camera_topics)"),
    'max_episode_steps': Param(100, 'episode time limit (truncation)', (1, 1 << 30)),
    'state_split': Param('train', "sim: initial states from the state-id table's 'train' or held-out 'eval' "
                                  "ids, one per episode; '' = gym-hil's fixed start"),
    'state_seed': Param(0, 'sim: seed of the state-id table (same seed, same states in any process)'),
    'num_train_states': Param(4096, 'sim: training state ids [0, N)', (1, 1 << 40)),
    'num_eval_states': Param(256, 'sim: held-out state ids [N, N + M)', (0, 1 << 40)),
    'task_id': Param(0, 'sim: 0 = pick and lift the cube, 1 = reach the cube (state only, dense reward)', (0, 1)),
    'reply_timeout_s': Param(300.0, 'give up when the policy does not answer a chunk in time', (0.1, 86400.0)),
    'request_resend_s': Param(5.0, 'resend a request that got no reply (lost in a link cut); the policy dedupes',
                              (0.1, 3600.0)),
    'stall_warn_s': Param(30.0, 'log what the rollout loop is stuck in (an env step or reset, a reply, a '
                          'subscriber) once a phase lasts longer, and again every as long', (1.0, 86400.0)),
    'intervention_timeout_s': Param(0.25, 'interventions older than this are stale and ignored', (0.0, 3600.0)),
    'control_rate_hz': Param(0.0, 'control steps per second at most (a chunk every chunk / rate s); 0 = as fast '
                                  'as the env steps (franky paces itself with control_dt)', (0.0, 10000.0)),
    'camera_topic_rate_hz': Param(2.0, 'rate of the sensor_msgs/Image side topic; 0 = off', (0.0, 1000.0)),
    'env_type': Param('sim', "'sim' (gym-hil MuJoCo Franka) or 'franky' (a real Franka via franky; franky-sim)"),
    'robot_ip': Param('172.16.0.2', 'franky: robot (or franky-sim) address'),
    'connect_timeout_s': Param(5.0, 'franky: fail configure, naming robot_ip, when the robot does not answer '
                                    'on TCP 1337 within this time', (0.1, 600.0)),
    'camera_topics': Param([''], "franky: one driver topic per camera (sensor_msgs/Image; '.../compressed': "
                                 "CompressedImage), named by camera_names in order or written NAME=TOPIC; "
                                 "[''] = no camera"),
    'camera_sync_tolerance_s': Param(0.1, 'franky: a step takes, per camera, the newest frame stamped within '
                                          "this of the robot state's time", (0.0, 10.0)),
    'camera_wait_s': Param(1.0, 'franky: how long a step waits for a frame within the tolerance before it '
                                'fails naming the camera', (0.0, 600.0)),
    'camera_configure_timeout_s': Param(5.0, 'franky: configure fails (nothing moves) unless every camera '
                                             'delivered a frame within this time', (0.1, 600.0)),
    'target_ee_pose': Param([0.5, 0.0, 0.3], 'franky: [x,y,z] | + rotation vector | + quaternion xyzw; the '
                                             "success of reward_source env (another source: no pose success)"),
    'pos_tolerance': Param(0.02, 'franky: success position tolerance (m)', (0.0, 1.0)),
    'rot_tolerance': Param(0.25, 'franky: success rotation tolerance (rad)', (0.0, 3.1416)),
    'success_hold_steps': Param(3, 'franky: steps the TCP must stay within tolerance', (1, 100000)),
    'action_scale': Param([0.05, 0.2], 'franky: metres and radians per unit action'),
    'no_gripper': Param(False, 'franky: arm without gripper (6-D actions)'),
    'workspace_min': Param([0.3, -0.3, 0.1], 'franky: TCP box, enforced before sending'),
    'workspace_max': Param([0.7, 0.3, 0.6], 'franky: TCP box, enforced before sending'),
    'max_step_m': Param(0.03, 'franky: per-step translation limit (velocity limit)', (0.0, 0.5)),
    'control_dt': Param(0.1, 'franky: control period (s)', (0.001, 10.0)),
    'reward_source': Param('env', "what gives the reward and the episode's success end: 'env' (the sim's; franky: "
                                  "target_ee_pose), 'classifier' (reward_classifier on the cameras) or 'operator' "
                                  "(only the operator's labels); the operator's label overrides each"),
    'reward_classifier': Param('', "reward_source classifier: run train_reward's success_classifier.pt (its "
                                   "cameras and image size must be the run's)"),
    'reward_threshold': Param(float('nan'), "success probability a frame must reach (NaN: the checkpoint's)"),
    'reward_hold': Param(2, 'consecutive frames at or over the threshold before the classifier\'s success counts',
                         (1, 10000)),
    'steps_after_success': Param(0, "after a success (the env's, the classifier's, the operator's label) the "
                                    'episode goes on for this many steps, each recorded as a success, then ends '
                                    "(LeRobot's number_of_steps_after_success): frames that show the task done, "
                                    'for train_reward; 0 in training runs', (0, 10000)),
    'sim_operator_delay': Param(-1, "sim: a scripted operator watches the sim and labels each success through the "
                                    "operator's label path (as a SpaceMouse chord or ~/episode_event would), this many "
                                    'steps after the sim\'s check first passes (0: the next step); -1: none',
                                (-1, 10000)),
    'task_description': Param('pick up the cube', 'recorded task (record_task_description)'),
    'teleop_only': Param(False, 'demonstrations: execute the teleop action every step, flags all 1'),
    'require_teleop': Param(False, 'never move without a teleop device: wait for an Intervention publisher '
                                   'before the first motion (reset included) and before every chunk'),
    'teleop_timeout_s': Param(30.0, 'require_teleop: fail (exit 1, nothing moved) when no teleop device '
                                    'publishes for this long', (0.0, 86400.0)),
    'collect_episodes': Param(False, 'record episodes with CollectEpisode'),
    'collect_dir': Param('outputs/collected_data', 'CollectEpisode save_dir (env_<rank> appended)'),
    'export_format': Param('lerobot', "'lerobot' or 'pickle'"),
    'lerobot_version': Param('v3.0', "'v3.0' or 'v2.1'"),
    'dataset_naming': Param('lerobot', "'lerobot' (observation.state, observation.images.<camera>, action, "
                                       "next.reward/done/success) or 'rlinf' (image, state, actions, done, "
                                       "is_success)"),
    'image_storage': Param('png', "'png' (lossless, inside the Parquet data) or 'video' (MP4, AV1 as "
                                  "lerobot 0.6.1 encodes it; v3.0 only)"),
    'only_success': Param(False, 'CollectEpisode only_success'),
    'fps': Param(10, 'dataset fps', (1, 1000)),
    'finalize_interval': Param(20, 'CollectEpisode finalize_interval', (0, 1 << 30)),
    'stop_deadline_s': Param(2.0, STOP_DEADLINE, (0.1, 4.9)),
}
