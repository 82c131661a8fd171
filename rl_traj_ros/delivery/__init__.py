"""End-to-end delivery without ROS: identities, outbox, row ledger and the exactly-once sink.

DDS reliability ends at the reader's process: a collector or writer that crashes loses what
it had received, and a link cut longer than the participant lease unmatches readers and drops
what was in flight. So the data path acknowledges end to end, in two hops:

    policy node --parts--> collector --Trajectory--> writer
                <-KeyAck--          <-TrajectoryAck-

- Every ``Trajectory`` the collector emits carries a ``TrajectoryId`` that names exactly the
  rows it holds (run, step, epoch, source, actor, micro-batch, shard, episode, env rows).
  The writer (``ExactlyOnceSink``) stores each identity once and acknowledges identities, only
  after the file and index are durable (or at once for a re-delivery it already stored).
- The collector keeps each emitted trajectory in an ``Outbox`` until its identity is
  acknowledged, and a ``RowLedger`` tracks, per chunk key, which env rows are not yet stored.
  A chunk key is acknowledged upstream (``KeyAck``) only when every row of it is in some stored
  trajectory (or was dropped on purpose, ``only_success``), so a shard, a micro-batch or one
  env's episode never releases the rows of its siblings.
- Producers resend what is unacknowledged when a consumer (re)appears or an ack is overdue;
  consumers deduplicate (the joiner by key, the writer by identity and by row).

Result: at-least-once on the wire, exactly once in the buffer, in every collector mode.
Memory stays bounded: the joiner forgets acknowledged keys after a grace window
(``RecentKeys``), the sink keeps a window of recent identities in memory (the index on disk
keeps all of them).
"""
