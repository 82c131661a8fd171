"""Parameters of the teleop nodes."""
import math

from .spec import Param

SPACEMOUSE_NODE = {
    'rate_hz': Param(100.0, 'publish rate (>= 100 Hz keeps the latency below the control period)', (1.0, 10000.0)),
    'deadzone': Param(0.001, 'motion norm above which the operator is intervening'),
    'latch_s': Param(0.5, 'stay active this long after the last motion or button', (0.0, 60.0)),
    'action_scale': Param(1.0, 'scale of the normalised device axes'),
    'no_gripper': Param(False, 'arm without gripper: 6-D actions'),
    'env_index': Param(-1, 'env to intervene on (-1: all envs of the env node)'),
    'replay_file': Param('', 'JSON-lines raw HID reports to replay instead of the device'),
    'hid_udp_port': Param(0, 'read raw HID reports from UDP datagrams on this localhost port instead'),
    'device_name': Param('SpaceMouseCompact', 'pyspacemouse device spec used for a replay'),
    'label_failure_s': Param(1.0, 'both buttons held together and released: shorter is the episode label success, '
                                  'longer failure (rewards.labels)', (0.05, 60.0)),
    'label_rerecord_s': Param(2.5, 'both buttons held longer than this: the label re-record', (0.1, 120.0)),
}

GELLO_NODE = {
    'port': Param('/dev/ttyUSB0', 'serial port of the leader arm (U2D2)'),
    'baudrate': Param(57600, 'Dynamixel baud rate'),
    'joint_ids': Param([1, 2, 3, 4, 5, 6, 7], 'servo ids of joints 1..7'),
    'joint_offsets': Param([0.0] * 7, 'rad; from the calibrate command'),
    'joint_signs': Param([1.0, 1.0, 1.0, 1.0, 1.0, -1.0, 1.0], 'FR3: 1 1 1 1 1 -1 1; Panda: 1 -1 1 1 1 -1 1'),
    'gripper_id': Param(8, 'servo id of the gripper trigger; <= 0: none'),
    'gripper_open_rad': Param(math.radians(195.0), 'trigger angle when open'),
    'gripper_closed_rad': Param(math.radians(152.0), 'trigger angle when closed'),
    'pos_scale': Param(0.05, "metres per unit action (the env's action_scale)"),
    'rot_scale': Param(0.2, 'radians per unit action'),
    'deadzone': Param(1e-3, 'action norm above which the operator is intervening'),
    'latch_s': Param(0.5, 'stay active this long after the last motion', (0.0, 60.0)),
    'no_gripper': Param(False, 'arm without gripper: 6-D actions'),
    'rate_hz': Param(100.0, 'read and publish rate', (1.0, 10000.0)),
    'env_index': Param(-1, 'env to intervene on (-1: all)'),
    'follower_joint_states': Param('/env_0/joint_states', "the follower robot's joint states"),
    'label_device': Param('', 'a foot switch or keyboard whose keys label the episode (teleop.pedal): its input '
                              'device, e.g. /dev/input/by-id/usb-PCsensor_FootSwitch-event-kbd; empty: none'),
    'label_keys': Param([31, 33, 19], 'evdev key codes of the labels success, failure, re-record (KEY_S, KEY_F, '
                                      'KEY_R; a PCsensor 3-pedal switch sends KEY_A, KEY_B, KEY_C: 30, 48, 46)'),
}
