"""QoS profiles of the data path, in one place so every node agrees.

Trajectory data must never be dropped: RELIABLE + KEEP_ALL makes a publisher hold every
sample until each matched reader acknowledged it (KEEP_LAST(depth) silently overwrites
unacknowledged samples when a reader lags; measured in shared/research/rclpy-throughput.md).
Teleop commands are the opposite: only the newest matters, so BEST_EFFORT depth 1. An episode
label is one event that must arrive: RELIABLE, a few deep, never latched (an old label must not
end a later episode).
"""
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

DATA_QOS = QoSProfile(reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_ALL,
                      durability=DurabilityPolicy.VOLATILE)
# Late joiners (a restarted collector) can still fetch what the producer holds.
DATA_QOS_LATCHED = QoSProfile(reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_ALL,
                              durability=DurabilityPolicy.TRANSIENT_LOCAL)
TELEOP_QOS = QoSProfile(reliability=ReliabilityPolicy.BEST_EFFORT, history=HistoryPolicy.KEEP_LAST, depth=1,
                        durability=DurabilityPolicy.VOLATILE)
SIDE_QOS = QoSProfile(reliability=ReliabilityPolicy.BEST_EFFORT, history=HistoryPolicy.KEEP_LAST, depth=2,
                      durability=DurabilityPolicy.VOLATILE)
# Policy weights: only the newest matters, and a late joiner (a restarted policy node) must get it.
WEIGHTS_QOS = QoSProfile(reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST, depth=1,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL)
EVENT_QOS = QoSProfile(reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST, depth=10,
                       durability=DurabilityPolicy.VOLATILE)
