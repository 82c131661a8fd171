"""The suite's xdist scheduler (a pytest plugin; test/conftest.py takes its hook)."""


def pytest_xdist_make_scheduler(config, log):
    """xdist 3.8.0's ``--dist loadfile`` after a worker crash waits for ever, in two ways
    (pytest-dev/pytest-xdist#784, #1323; CI ran out of its 90 minutes so):

    - it puts the crashed worker's *whole* workload back on the queue, finished files included, and
      a finished file then goes to the replacement worker as an empty batch;
    - it gives the replacement one file, and a worker runs a test only once it knows the next one
      (or is told to shut down): a file of one test left waits for ever.

    So: only unfinished files go back, less the test the worker died in (xdist has reported it
    failed; run again, it would take the replacement down too), and a worker is topped up until it
    holds more than two tests or the queue is empty (then it is told to finish). Work sent to a
    worker that has just died (its reports came in before its death did: an INTERNALERROR, "cannot
    send", in xdist itself) goes back with the rest of its workload."""
    if config.getvalue('dist') != 'loadfile':
        return None
    from xdist.scheduler import LoadFileScheduling

    class Scheduling(LoadFileScheduling):
        def remove_node(self, node):
            workload = self.assigned_work.pop(node)
            if not self._pending_of(workload):
                return None
            crashitem = next(nodeid for unit in workload.values() for nodeid, done in unit.items() if not done)
            workload[self._split_scope(crashitem)][crashitem] = True
            self.workqueue.update({scope: unit for scope, unit in workload.items() if not all(unit.values())})
            for other in self.assigned_work:
                self._reschedule(other)
            return crashitem

        def _reschedule(self, node):
            try:
                while not node.shutting_down:
                    if not self.workqueue:
                        node.shutdown()
                        return
                    if self._pending_of(self.assigned_work[node]) > 2:
                        return
                    self._assign_work_unit(node)
            except OSError:  # execnet's "cannot send": the worker died since its last report; its
                return       # errordown follows, and remove_node puts what it was given back

    return Scheduling(config, log)
